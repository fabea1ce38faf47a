//! Builds Spool task handlers written in C into WebAssembly components.
//!
//! The pipeline: generate C bindings for the `handler` world with `wit-bindgen-c`, compile the
//! project's `*.c` files together with the bindings into a WASI preview1 *reactor* core module
//! with clang and wasi-libc, then wrap that module into a component with `wit-component` and
//! the preview1 reactor adapter (which turns its WASI preview1 imports into WASI 0.2 ones).
//!
//! The toolchain is Debian's (or any clang with a wasm32-wasi sysroot): `clang`, `wasm-ld`
//! (from `lld`), wasi-libc and the wasm32 compiler-rt builtins. `WASI_SYSROOT` points at a
//! sysroot elsewhere (for instance one from wasi-sdk); `CLANG` names another clang binary.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_bindgen_core::Files;
use wit_component::ComponentEncoder;
use wit_parser::Resolve;

use crate::error::{Error, IoContext, Result};
use crate::files::write_if_changed;
use crate::process::{describe, start_error};

/// The command that installs everything this module needs on Debian and Ubuntu.
const INSTALL_HINT: &str = "apt-get install clang lld wasi-libc libclang-rt-dev-wasm32";

/// The world every handler implements (see `wit/handler.wit`).
const WORLD: &str = "handler";

/// Builds the C handler whose sources (`*.c`, `*.h`) are in `project` into a component at `out`.
/// `wit_dir` holds handler.wit; `work` is a scratch folder (created if missing) for generated bindings
/// (`handler.h`, `handler.c`) and the core module.
pub fn build(project: &Path, wit_dir: &Path, work: &Path, out: &Path) -> Result<()> {
    let toolchain = Toolchain::find()?;
    let sources = c_sources(project)?;
    fs::create_dir_all(work).at("cannot create the work folder", work)?;

    let objects = generate_bindings(wit_dir, work)?;

    let core = work.join("core.wasm");
    let mut inputs = sources;
    inputs.extend(objects);
    toolchain.compile(&clang_args(
        toolchain.sysroot.as_deref(),
        project,
        work,
        &inputs,
        &core,
    ))?;

    let module = fs::read(&core).at("cannot read", &core)?;
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .map_err(component_error(
            "read the handler world's type information in the compiled module",
        ))?
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .map_err(component_error("use the WASI preview1 reactor adapter"))?
        .encode()
        .map_err(component_error("turn the compiled module into a component"))?;

    write_if_changed(out, &component)
}

/// Turns the WebAssembly tooling's error (with its causes) into [`Error::Component`].
fn component_error<E: std::fmt::Display>(step: impl Into<String>) -> impl FnOnce(E) -> Error {
    let step = step.into();
    move |error| Error::Component {
        step,
        detail: format!("{error:#}"),
    }
}

/// Writes the C bindings of the handler world into `work` and returns the files to link
/// (the generated `.c` file and the object holding the world's component type).
fn generate_bindings(wit_dir: &Path, work: &Path) -> Result<Vec<PathBuf>> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(wit_dir).map_err(component_error(format!(
        "read the WIT files in {}",
        wit_dir.display()
    )))?;
    let world = resolve
        .select_world(&[package], Some(WORLD))
        .map_err(component_error("find the handler world in the WIT files"))?;

    let mut files = Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(component_error("generate the C bindings"))?;

    let mut link = Vec::new();
    for (name, contents) in files.iter() {
        let path = work.join(name);
        fs::write(&path, contents).at("cannot write", &path)?;
        if name.ends_with(".c") || name.ends_with(".o") {
            link.push(path);
        }
    }
    Ok(link)
}

/// The project's C files, sorted so that builds are reproducible.
fn c_sources(project: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(project).at("cannot read the handler folder", project)?;
    let mut sources = Vec::new();
    for entry in entries {
        let path = entry.at("cannot read the handler folder", project)?.path();
        if path.is_file() && path.extension().is_some_and(|ext| ext == "c") {
            sources.push(path);
        }
    }
    if sources.is_empty() {
        return Err(Error::IncompleteProject {
            dir: project.to_path_buf(),
            problem: "holds no .c file; a C handler's sources are the *.c files in its folder"
                .into(),
        });
    }
    sources.sort();
    Ok(sources)
}

/// The clang arguments that compile and link `inputs` into a reactor core module at `output`.
fn clang_args(
    sysroot: Option<&Path>,
    project: &Path,
    work: &Path,
    inputs: &[PathBuf],
    output: &Path,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--target=wasm32-wasi".into(),
        // A reactor has no `main`: the host calls its exports after `_initialize`.
        "-mexec-model=reactor".into(),
        "-O2".into(),
        "-Wall".into(),
        // wasi-libc ships with DWARF; dropping it makes a component about a third the size.
        "-Wl,--strip-debug".into(),
    ];
    if let Some(root) = sysroot {
        args.push(flag_with_path("--sysroot=", root));
    }
    args.push(flag_with_path("-I", work));
    args.push(flag_with_path("-I", project));
    args.extend(inputs.iter().map(|input| input.as_os_str().to_owned()));
    args.push("-o".into());
    args.push(output.as_os_str().to_owned());
    args
}

fn flag_with_path(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path);
    arg
}

/// The C compiler and the WASI sysroot it builds against.
struct Toolchain {
    clang: OsString,
    /// `None` for a sysroot that clang finds by itself (Debian's `/usr/*/wasm32-wasi`).
    sysroot: Option<PathBuf>,
}

impl Toolchain {
    /// Checks that clang, wasm-ld, wasi-libc and the wasm32 builtins are installed.
    fn find() -> Result<Toolchain> {
        let clang = std::env::var_os("CLANG").unwrap_or_else(|| "clang".into());
        let mut version = Command::new(&clang);
        version.arg("--version");
        let hint = format!(
            "C handlers need clang with WebAssembly support; install it with `{INSTALL_HINT}`"
        );
        let output = version
            .output()
            .map_err(|error| start_error(&version, error, &hint))?;
        if !output.status.success() {
            return Err(Error::IncompleteToolchain {
                problem: format!("`{}` failed ({})", describe(&version), output.status),
                fix: hint,
            });
        }

        let sysroot = std::env::var_os("WASI_SYSROOT").map(PathBuf::from);
        let missing = missing_sysroot_files(sysroot.as_deref().unwrap_or(Path::new("/usr")));
        if !missing.is_empty() {
            return Err(Error::IncompleteToolchain {
                problem: format!(
                    "the WASI sysroot is incomplete ({} missing)",
                    missing
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                fix: format!(
                    "install wasi-libc with `{INSTALL_HINT}`, or set WASI_SYSROOT to a wasi-sdk sysroot"
                ),
            });
        }

        let toolchain = Toolchain { clang, sysroot };
        let builtins = toolchain.query(&["-print-libgcc-file-name"])?;
        if !Path::new(&builtins).is_file() {
            return Err(Error::IncompleteToolchain {
                problem: format!("the wasm32 compiler-rt builtins ({builtins}) are missing"),
                fix: format!("install them with `{INSTALL_HINT}`"),
            });
        }
        let linker = toolchain.query(&["-print-prog-name=wasm-ld"])?;
        if !Path::new(&linker).is_file() && !on_path(&linker) {
            return Err(Error::IncompleteToolchain {
                problem: "the WebAssembly linker wasm-ld is missing".into(),
                fix: format!("install lld with `{INSTALL_HINT}`"),
            });
        }
        Ok(toolchain)
    }

    /// Runs clang for the wasm32-wasi target with `args` and returns its trimmed output.
    fn query(&self, args: &[&str]) -> Result<String> {
        let mut command = Command::new(&self.clang);
        command.arg("--target=wasm32-wasi");
        if let Some(root) = &self.sysroot {
            command.arg(flag_with_path("--sysroot=", root));
        }
        command.args(args);
        let output = command
            .output()
            .map_err(|error| start_error(&command, error, INSTALL_HINT))?;
        if !output.status.success() {
            return Err(Error::CommandFailed {
                command: describe(&command),
                status: output.status,
                output: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Runs clang with `args`; its diagnostics go into the error, or to stderr on success.
    fn compile(&self, args: &[OsString]) -> Result<()> {
        let mut command = Command::new(&self.clang);
        command.args(args);
        let output = command
            .output()
            .map_err(|error| start_error(&command, error, INSTALL_HINT))?;
        let diagnostics = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(Error::CompileFailed {
                compiler: self.clang.to_string_lossy().into_owned(),
                status: output.status,
                diagnostics: diagnostics.into_owned(),
            });
        }
        if !diagnostics.trim().is_empty() {
            eprint!("{diagnostics}");
        }
        Ok(())
    }
}

/// The files a wasm32-wasi sysroot needs that are absent under `root`. Headers may sit in
/// `include/wasm32-wasi` (Debian, recent wasi-sdk) or in `include` (older wasi-sdk).
fn missing_sysroot_files(root: &Path) -> Vec<PathBuf> {
    let headers = [
        root.join("include/wasm32-wasi/stdlib.h"),
        root.join("include/stdlib.h"),
    ];
    let lib = root.join("lib/wasm32-wasi");
    let mut missing = Vec::new();
    if !headers.iter().any(|header| header.is_file()) {
        missing.push(headers[0].clone());
    }
    for file in [lib.join("libc.a"), lib.join("crt1-reactor.o")] {
        if !file.is_file() {
            missing.push(file);
        }
    }
    missing
}

/// True when `program` is a bare name found in one of the `PATH` folders.
fn on_path(program: &str) -> bool {
    !program.contains('/')
        && std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clang_args_build_a_reactor_from_all_inputs() {
        let inputs = [PathBuf::from("/p/a.c"), PathBuf::from("/w/handler.c")];
        let args = clang_args(
            None,
            Path::new("/p"),
            Path::new("/w"),
            &inputs,
            Path::new("/w/core.wasm"),
        );
        let args: Vec<_> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--target=wasm32-wasi",
                "-mexec-model=reactor",
                "-O2",
                "-Wall",
                "-Wl,--strip-debug",
                "-I/w",
                "-I/p",
                "/p/a.c",
                "/w/handler.c",
                "-o",
                "/w/core.wasm"
            ]
        );
    }

    #[test]
    fn clang_args_pass_an_explicit_sysroot() {
        let args = clang_args(
            Some(Path::new("/opt/wasi")),
            Path::new("p"),
            Path::new("w"),
            &[],
            Path::new("o"),
        );
        assert!(args.iter().any(|a| a == "--sysroot=/opt/wasi"));
    }

    #[test]
    fn an_empty_sysroot_lists_every_missing_file() {
        let root = Path::new("/nonexistent-wasi-sysroot");
        assert_eq!(
            missing_sysroot_files(root),
            [
                root.join("include/wasm32-wasi/stdlib.h"),
                root.join("lib/wasm32-wasi/libc.a"),
                root.join("lib/wasm32-wasi/crt1-reactor.o")
            ]
        );
    }

    #[test]
    fn a_sysroot_with_headers_in_plain_include_is_complete() {
        let root = std::env::temp_dir().join(format!("spool-c-sysroot-{}", std::process::id()));
        let lib = root.join("lib/wasm32-wasi");
        fs::create_dir_all(&lib).unwrap();
        fs::create_dir_all(root.join("include")).unwrap();
        for file in [
            root.join("include/stdlib.h"),
            lib.join("libc.a"),
            lib.join("crt1-reactor.o"),
        ] {
            fs::write(file, "").unwrap();
        }
        let missing = missing_sysroot_files(&root);
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(missing, Vec::<PathBuf>::new());
    }
}
