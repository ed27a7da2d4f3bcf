// Gives this crate's tests the rpath that shardrec-sys found through pkg-config.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SHARDREC_RPATH");
    if let Ok(rpath) = std::env::var("DEP_SHARDREC_RPATH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{rpath}");
    }
}
