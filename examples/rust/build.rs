// Adds the rpath of libshardrec (from the `pkg-config` binary) so the example runs without
// LD_LIBRARY_PATH; linking itself comes from shardrec-sys.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let out = Command::new("pkg-config").args(["--libs", "shardrec"]).output();
    if let Ok(out) = out {
        for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
            }
        }
    }
}
