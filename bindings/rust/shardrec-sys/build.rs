// Links libshardrec through the `pkg-config` binary (no crates), and, when asked with
// SHARDREC_SYS_CHECK_BINDINGS=1, checks that src/bindings.rs equals a fresh bindgen run
// (SHARDREC_SYS_WRITE_BINDINGS=1 rewrites it instead).
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn pkg_config(args: &[&str]) -> String {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("shardrec")
        .output()
        .unwrap_or_else(|e| panic!("cannot run pkg-config: {e}"));
    if !out.status.success() {
        panic!(
            "pkg-config {:?} shardrec failed (set PKG_CONFIG_PATH to the folder of shardrec.pc): {}",
            args,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).expect("pkg-config output is UTF-8")
}

fn bindgen(cflags: &str) -> String {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let mut cmd = Command::new(env::var("BINDGEN").unwrap_or_else(|_| "bindgen".into()));
    cmd.arg(manifest.join("wrapper.h"))
        .args(["--allowlist-function", "shardrec_.*"])
        .args(["--allowlist-type", "shardrec_.*"])
        .args(["--allowlist-var", "SHARDREC_.*"])
        .args(["--size_t-is-usize", "--no-doc-comments"])
        .arg("--");
    cmd.args(cflags.split_whitespace().filter(|f| f.starts_with("-I")));
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run bindgen: {e}"));
    if !out.status.success() {
        panic!("bindgen failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout).expect("bindgen output is UTF-8")
}

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=SHARDREC_SYS_CHECK_BINDINGS");
    println!("cargo:rerun-if-env-changed=SHARDREC_SYS_WRITE_BINDINGS");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=src/bindings.rs");

    let libs = pkg_config(&["--libs"]);
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if let Some(rpath) = flag.strip_prefix("-Wl,-rpath,") {
            // Dependents (DEP_SHARDREC_RPATH) add it to their tests and binaries, so they find
            // the library without LD_LIBRARY_PATH.
            println!("cargo:rustc-link-arg=-Wl,-rpath,{rpath}");
            println!("cargo:rpath={rpath}");
        }
    }

    let check = env::var("SHARDREC_SYS_CHECK_BINDINGS").map_or(false, |v| v == "1");
    let write = env::var("SHARDREC_SYS_WRITE_BINDINGS").map_or(false, |v| v == "1");
    if check || write {
        let cflags = pkg_config(&["--cflags"]);
        for flag in cflags.split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-I") {
                println!("cargo:rerun-if-changed={dir}/shardrec");
            }
        }
        let fresh = bindgen(&cflags);
        let path = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/bindings.rs");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if write {
            if committed != fresh {
                std::fs::write(&path, fresh).expect("write src/bindings.rs");
            }
        } else if committed != fresh {
            panic!(
                "src/bindings.rs is stale: rerun with SHARDREC_SYS_WRITE_BINDINGS=1 \
                 (cargo build -p shardrec-sys) to regenerate it from the C headers"
            );
        }
    }
}
