//! Every function the C headers declare is reachable from the `shardrec` crate: its sources call
//! it through `shardrec-sys`, or it is one that docs/bindings.md names as C-only:
//! `shardrec_last_error` (the crate copies the error text with `shardrec_last_error_copy`) and
//! `shardrec_embedding_dynamic_delta` (superseded by `shardrec_embedding_dynamic_delta_ext`, the
//! same delta and its flags, which `dynamic_delta` calls).
//! A new C call without a Rust binding fails here.
use std::fs;
use std::path::Path;

fn read_dir(dir: &Path, ext: &str) -> String {
    let mut text = String::new();
    for entry in fs::read_dir(dir).expect("directory") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == ext) {
            text += &fs::read_to_string(&path).expect("read");
        }
    }
    text
}

/// Whether `text` holds `path` as a whole name (not the start of a longer one).
fn calls(text: &str, path: &str) -> bool {
    text.match_indices(path).any(|(at, _)| {
        !text[at + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn every_c_function_is_reachable() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let headers = read_dir(&crate_dir.join("../../../capi/include/shardrec"), "h");
    let sources = read_dir(&crate_dir.join("src"), "rs");
    let mut declared = 0;
    let mut missing = Vec::new();
    // Each declaration: SHARDREC_API, the return type, then the name and '('.
    for decl in headers.split("SHARDREC_API").skip(1) {
        let head = &decl[..decl.find('(').expect("a declaration has a parameter list")];
        let name = head
            .split_whitespace()
            .last()
            .expect("name")
            .trim_start_matches('*');
        if !name.starts_with("shardrec_") {
            continue;
        }
        declared += 1;
        let c_only = name == "shardrec_last_error" || name == "shardrec_embedding_dynamic_delta";
        if !c_only && !calls(&sources, &format!("sys::{name}")) {
            missing.push(name.to_string());
        }
    }
    assert!(
        declared >= 100,
        "found only {declared} declarations in the headers"
    );
    assert!(
        missing.is_empty(),
        "not reachable from the crate: {missing:?}"
    );
}
