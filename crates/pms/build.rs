//! Link settings for the `pms` binary.
//!
//! Packed relative relocations (`-z pack-relative-relocs`, `DT_RELR`) on Linux with glibc. `pms`
//! is a position-independent executable with about 30,000 relative relocations. In the classic
//! format they fill 730 KB that the dynamic loader reads at every start, and those pages stay
//! resident for the life of the process; packed, they fill 9 KB. Measured on the gateway (one
//! binary for every component, so every component pays it): RSS when ready 13.3 → 11.5 MB, peak
//! RSS under `scripts/bench-proxies.sh`'s loads 21.3 → 19.7 MB, in the same run, with the same
//! CPU per request (docs/benchmarks.md, "Memory").
//!
//! It needs GNU ld 2.38 or lld 15 (an older linker warns and ignores it) and, where the binary
//! runs, glibc 2.36 (Debian 12, Ubuntu 22.10 and later).

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
