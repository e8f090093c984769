//! `pms`'s build script, compiled and run on its own with the environment Cargo would give it:
//! it hands the hot-code layout to a linker that takes it, falls back with a warning when the
//! linker does not, and stays out of debug builds and of builds that turn it off.

use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The build script compiled once into `dir`.
fn compile_build_script(dir: &Path) -> PathBuf {
    let exe = dir.join("build-script");
    let status = Command::new(rustc())
        .args(["--edition", "2021", "-o"])
        .arg(&exe)
        .arg(Path::new(MANIFEST_DIR).join("build.rs"))
        .status()
        .expect("rustc runs");
    assert!(status.success(), "build.rs compiles");
    exe
}

fn rustc() -> String {
    std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned())
}

/// The host triple, from `rustc -vV`.
fn host() -> String {
    let out = Command::new(rustc())
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host")
}

/// Whether this toolchain links with lld by default (Rust 1.90 and later on x86_64 Linux, from
/// rustup): lld signs what it links with "Linker: LLD" in the `.comment` section.
fn links_with_lld_by_default(dir: &Path) -> bool {
    let source = dir.join("hello.rs");
    let exe = dir.join("hello");
    std::fs::write(&source, "fn main() {}\n").unwrap();
    let status = Command::new(rustc())
        .arg("-o")
        .arg(&exe)
        .arg(&source)
        .status()
        .expect("rustc runs");
    assert!(status.success(), "an empty program links");
    let bytes = std::fs::read(&exe).unwrap();
    bytes.windows(11).any(|w| w == b"Linker: LLD")
}

/// Runs the build script with `profile` and the encoded `rustflags`; returns its stdout.
fn run(exe: &Path, out_dir: &Path, profile: &str, rustflags: &[&str], off: bool) -> String {
    let mut cmd = Command::new(exe);
    cmd.env_remove("PMS_SYMBOL_ORDER")
        .env_remove("RUSTC_LINKER")
        .env("RUSTC", rustc())
        .env("TARGET", host())
        .env("PROFILE", profile)
        .env("CARGO_CFG_TARGET_OS", std::env::consts::OS)
        .env("CARGO_MANIFEST_DIR", MANIFEST_DIR)
        .env("OUT_DIR", out_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"));
    if off {
        cmd.env("PMS_SYMBOL_ORDER", "off");
    }
    let out = cmd.output().expect("build script runs");
    assert!(out.status.success(), "build script exits 0");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn optimized_builds_pass_the_order_file_to_a_linker_that_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_build_script(dir.path());
    let order = Path::new(MANIFEST_DIR).join("symbol-order.txt");
    assert!(order.is_file(), "{} exists", order.display());

    // lld, the toolchain's default linker where CI runs, takes the option.
    if links_with_lld_by_default(dir.path()) {
        let out = run(&exe, dir.path(), "release", &[], false);
        let expected = format!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        assert!(out.lines().any(|l| l == expected), "{out}");
        assert!(!out.contains("cargo:warning"), "{out}");
    }

    // GNU ld does not: the script says so and leaves the link alone.
    let out = run(
        &exe,
        dir.path(),
        "release",
        &["-Clink-arg=-fuse-ld=bfd"],
        false,
    );
    assert!(!out.contains("rustc-link-arg"), "{out}");
    assert!(
        out.contains("cargo:warning=the linker does not take --symbol-ordering-file"),
        "{out}"
    );
}

#[test]
fn debug_builds_and_opted_out_builds_link_as_usual() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_build_script(dir.path());
    for (profile, off) in [("debug", false), ("release", true)] {
        let out = run(&exe, dir.path(), profile, &[], off);
        assert!(
            !out.contains("rustc-link-arg"),
            "{profile} off={off}: {out}"
        );
        assert!(!out.contains("cargo:warning"), "{profile} off={off}: {out}");
        assert!(out.contains("cargo:rerun-if-env-changed=PMS_SYMBOL_ORDER"));
    }
}
