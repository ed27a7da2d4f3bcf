// Finds libshardrec through the `pkg-config` binary (no crates; SHARDREC_PREFIX, this crate's
// own install prefix, then PKG_CONFIG_PATH: see pc_dir) and links it so that every program
// depending on this crate starts without LD_LIBRARY_PATH; when asked with
// SHARDREC_SYS_CHECK_BINDINGS=1, checks that src/bindings.rs equals a fresh bindgen run
// (SHARDREC_SYS_WRITE_BINDINGS=1 rewrites it instead).
//
// Why a link stub: Cargo applies `rustc-link-arg` (an rpath) only to this crate's own tests
// and binaries, never to the programs of dependents, and a stable compiler has no other way
// for a library crate to put an rpath into its users' executables. Instead the program links
// against a stub library in OUT_DIR that exports the same `shardrec_*` symbols and whose SONAME
// is the absolute path of the real library; the linker records that path as DT_NEEDED, so the
// dynamic loader opens the real libshardrec from where pkg-config found it. Without a C
// compiler the crate links the library directly and adds the rpath to its own targets only.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Stops the build with @p message and no panic (a panic adds its location and a backtrace hint
/// that say nothing to a user); cargo prints the build script's stderr.
fn fail(message: &str) -> ! {
    eprintln!("error: shardrec-sys: {message}");
    std::process::exit(1);
}

/// The folder of a prefix's shardrec.pc: <prefix>/lib/pkgconfig, lib64/pkgconfig or a Debian
/// multiarch lib/<triplet>/pkgconfig.
fn prefix_pc_dir(prefix: &Path) -> Option<PathBuf> {
    let mut dirs = vec![prefix.join("lib/pkgconfig"), prefix.join("lib64/pkgconfig")];
    if let Ok(entries) = std::fs::read_dir(prefix.join("lib")) {
        let mut multiarch: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("pkgconfig"))
            .collect();
        multiarch.sort();
        dirs.extend(multiarch);
    }
    dirs.into_iter().find(|d| d.join("shardrec.pc").is_file())
}

/// Where shardrec.pc is looked for, in this order:
/// 1. $SHARDREC_PREFIX, when set: the prefix libshardrec was installed into, an absolute path (an
///    explicit choice is honoured alone, so a typo is reported instead of silently finding
///    another install);
/// 2. the file pkgconfig-dir, a path relative to this crate, written by the install: the crates
///    in <prefix>/share/shardrec/rust find their own prefix, wherever it was moved;
/// 3. pkg-config's own search ($PKG_CONFIG_PATH, then its default folders).
/// Returns the folder to put first on PKG_CONFIG_PATH (None for 3) and, for 3, what was tried.
fn pc_dir() -> (Option<PathBuf>, String) {
    if let Some(prefix) = env::var_os("SHARDREC_PREFIX").filter(|p| !p.is_empty()) {
        let prefix = PathBuf::from(prefix);
        // Cargo runs this script in the crate's folder, not where the user typed the command,
        // so a relative path would silently mean another folder.
        if prefix.is_relative() {
            fail(&format!(
                "SHARDREC_PREFIX must be an absolute path (build scripts run in the crate's own \
                 folder, {}), got {}",
                env::var("CARGO_MANIFEST_DIR").unwrap_or_default(),
                prefix.display()
            ));
        }
        return match prefix_pc_dir(&prefix) {
            Some(dir) => (Some(dir), String::new()),
            None => fail(&format!(
                "SHARDREC_PREFIX is {} but it has no lib/pkgconfig/shardrec.pc (nor lib64/ or \
                 lib/<triplet>/); set it to the folder libshardrec was installed into, the one \
                 holding include/shardrec and lib/",
                prefix.display()
            )),
        };
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let mut tried = Vec::new();
    if let Ok(rel) = std::fs::read_to_string(manifest.join("pkgconfig-dir")) {
        let dir = manifest.join(rel.trim());
        if dir.join("shardrec.pc").is_file() {
            return (Some(dir), String::new());
        }
        tried.push(format!(
            "{} (this crate's install prefix: the crate was copied out of it)",
            dir.display()
        ));
    }
    match env::var("PKG_CONFIG_PATH") {
        Ok(p) if !p.is_empty() => tried.push(format!("PKG_CONFIG_PATH={p}")),
        _ => tried.push("PKG_CONFIG_PATH (not set)".into()),
    }
    tried.push("pkg-config's default folders".into());
    (None, tried.join(", "))
}

fn pkg_config(args: &[&str]) -> String {
    let mut cmd = Command::new("pkg-config");
    let (first, tried) = pc_dir();
    if let Some(dir) = first {
        let mut path = dir.into_os_string();
        if let Some(old) = env::var_os("PKG_CONFIG_PATH") {
            path.push(":");
            path.push(old);
        }
        cmd.env("PKG_CONFIG_PATH", path);
    }
    let out = cmd.args(args).arg("shardrec").output().unwrap_or_else(|e| {
        fail(&format!(
            "cannot run pkg-config ({e}); install pkg-config (Debian: pkgconf)"
        ))
    });
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        fail(&format!(
            "cannot find libshardrec: no shardrec.pc in {tried}{}{}. Set SHARDREC_PREFIX to the \
             folder libshardrec was installed into (e.g. SHARDREC_PREFIX=/opt/shardrec), or \
             PKG_CONFIG_PATH to its lib/pkgconfig folder",
            if why.trim().is_empty() {
                ""
            } else {
                "; pkg-config: "
            },
            why.trim()
        ));
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
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run bindgen: {e}"));
    if !out.status.success() {
        panic!("bindgen failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout).expect("bindgen output is UTF-8")
}

/// The SONAME and the exported `shardrec_*` functions of a little-endian ELF64 library.
struct ElfExports {
    soname: String,
    functions: Vec<String>,
}

fn read_exports(path: &Path) -> Option<ElfExports> {
    let data = std::fs::read(path).ok()?;
    let u16_at = |o: usize| Some(u16::from_le_bytes(data.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(data.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(data.get(o..o + 8)?.try_into().ok()?));
    let cstr = |o: usize| -> Option<String> {
        let rest = data.get(o..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    // ELF64 (class 2), little endian (data 1).
    if data.get(0..4)? != b"\x7fELF" || *data.get(4)? != 2 || *data.get(5)? != 1 {
        return None;
    }
    let shoff = u64_at(0x28)? as usize;
    let shentsize = u16_at(0x3a)? as usize;
    let shnum = u16_at(0x3c)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let h = shoff + i * shentsize;
        // type, offset, size, link, entsize
        Some((
            u32_at(h + 4)?,
            u64_at(h + 0x18)? as usize,
            u64_at(h + 0x20)? as usize,
            u32_at(h + 0x28)?,
            u64_at(h + 0x38)? as usize,
        ))
    };
    let mut exports = ElfExports {
        soname: String::new(),
        functions: Vec::new(),
    };
    for i in 0..shnum {
        let (kind, off, size, link, entsize) = section(i)?;
        let strtab = section(link as usize)?.1;
        if kind == 6 {
            // SHT_DYNAMIC: DT_SONAME (14) points into the linked string table.
            for e in (off..off + size).step_by(16) {
                if u64_at(e)? == 14 {
                    exports.soname = cstr(strtab + u64_at(e + 8)? as usize)?;
                }
            }
        } else if kind == 11 && entsize == 24 {
            // SHT_DYNSYM: defined (shndx != 0) global (bind 1) functions (type 2).
            for s in (off..off + size).step_by(24) {
                let info = *data.get(s + 4)?;
                let defined = u16_at(s + 6)? != 0;
                if defined && info >> 4 == 1 && info & 0xf == 2 {
                    let name = cstr(strtab + u32_at(s)? as usize)?;
                    if name.starts_with("shardrec_") {
                        exports.functions.push(name);
                    }
                }
            }
        }
    }
    Some(exports)
}

/// Builds OUT_DIR/stub/libshardrec.so; returns its folder, or None (with the reason).
fn build_stub(libdir: &Path) -> Result<PathBuf, String> {
    let real = libdir.join("libshardrec.so");
    let exports = read_exports(&real).ok_or_else(|| format!("cannot read {}", real.display()))?;
    if exports.soname.is_empty() || exports.functions.is_empty() {
        return Err(format!(
            "{} has no SONAME or no shardrec_* functions",
            real.display()
        ));
    }
    let needed = libdir.join(&exports.soname);
    if !needed.exists() {
        return Err(format!("{} does not exist", needed.display()));
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("stub");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let mut source = String::from("/* Link stub: the real definitions live in libshardrec. */\n");
    for f in &exports.functions {
        source.push_str(&format!("void {f}(void) {{}}\n"));
    }
    let c_file = out.join("stub.c");
    std::fs::write(&c_file, source).map_err(|e| e.to_string())?;
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(out.join("libshardrec.so"))
        .arg(format!("-Wl,-soname,{}", needed.display()))
        .arg(&c_file)
        .status()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !status.success() {
        return Err(format!("{cc} failed to build the link stub"));
    }
    Ok(out)
}

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=SHARDREC_PREFIX");
    println!("cargo:rerun-if-env-changed=SHARDREC_SYS_CHECK_BINDINGS");
    println!("cargo:rerun-if-env-changed=SHARDREC_SYS_WRITE_BINDINGS");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=src/bindings.rs");
    println!("cargo:rerun-if-changed=pkgconfig-dir");

    // A relocatable shardrec.pc gives <pc folder>/../../lib: resolved, so the link stub's
    // SONAME (the path the programs record) is plain.
    let reported = PathBuf::from(pkg_config(&["--variable=libdir"]).trim());
    let libdir = std::fs::canonicalize(&reported).unwrap_or_else(|e| {
        fail(&format!(
            "shardrec.pc names the library folder {} ({e})",
            reported.display()
        ))
    });
    println!(
        "cargo:rerun-if-changed={}",
        libdir.join("libshardrec.so").display()
    );
    // Dependents with a build script read DEP_SHARDREC_LIBDIR.
    println!("cargo:libdir={}", libdir.display());
    match build_stub(&libdir) {
        Ok(stub) => {
            println!("cargo:rustc-link-search=native={}", stub.display());
            println!("cargo:rustc-link-lib=dylib=shardrec");
        }
        Err(why) => {
            println!("cargo:warning=linking libshardrec directly ({why}); programs of other crates need an rpath or LD_LIBRARY_PATH to {}", libdir.display());
            println!("cargo:rustc-link-search=native={}", libdir.display());
            println!("cargo:rustc-link-lib=dylib=shardrec");
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", libdir.display());
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
