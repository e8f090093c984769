//! Lays out the gateway's hot code together in optimized builds of `pms`.
//!
//! `symbol-order.txt` lists the functions a profiled gateway executed (start-up, HTTP/1.1 in
//! clear and over TLS, HTTP/2 over TLS, h2c, shutdown), hottest first; `scripts/symbol-order.sh`
//! regenerates it. Given to the linker as `--symbol-ordering-file`, it puts those functions next
//! to each other at the start of `.text`. The kernel maps a program's code in 64 KB runs around
//! every page touched, so hot functions spread over the whole binary keep most of it resident;
//! packed together they keep about 4 MB less (docs/benchmarks.md, "Memory").
//!
//! The layout changes no behaviour. It is applied only to optimized profiles (`release`,
//! `quick`), only on Linux, and only when a probe link with the same compiler, target, flags and
//! linker accepts the option: lld (Rust's default linker on x86_64 Linux since 1.90) does, GNU ld
//! does not. Names the file lists that a build no longer has are skipped by the linker.
//! `PMS_SYMBOL_ORDER=off` builds without it.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ORDER_FILE: &str = "symbol-order.txt";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=PMS_SYMBOL_ORDER");

    let optimized = env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let off = env::var("PMS_SYMBOL_ORDER").is_ok_and(|v| v == "off");
    if !optimized || !linux || off {
        return;
    }

    let Some(manifest_dir) = env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return;
    };
    let order = manifest_dir.join(ORDER_FILE);
    if !order.is_file() {
        return;
    }
    let args = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        // Functions that changed name since the file was made are expected, not news.
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    if linker_accepts(&args) {
        for arg in &args {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    } else {
        println!(
            "cargo:warning=the linker does not take --symbol-ordering-file (lld does); `pms` is \
             built without the hot-code layout and keeps about 4 MB more code resident"
        );
    }
}

/// Links an empty program with the compiler, target, flags and linker Cargo uses for `pms`,
/// plus `args`, and says whether that worked.
fn linker_accepts(args: &[String]) -> bool {
    let (Some(rustc), Some(out_dir), Ok(target)) = (
        env::var_os("RUSTC"),
        env::var_os("OUT_DIR").map(PathBuf::from),
        env::var("TARGET"),
    ) else {
        return false;
    };
    let source = out_dir.join("probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut cmd = Command::new(rustc);
    cmd.arg("--target").arg(target).arg("--crate-type=bin");
    cmd.arg("-o").arg(out_dir.join("probe")).arg(&source);
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        cmd.arg("-C")
            .arg(format!("linker={}", Path::new(&linker).display()));
    }
    for arg in args {
        cmd.arg("-C").arg(format!("link-arg={arg}"));
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd.status().is_ok_and(|status| status.success())
}
