//! `spool plugin build`: a handler project into `NAME.wasm` (and its manifest) in the plugin
//! folder, through its language's recipe.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::files::write_if_changed;
use spool_rules::names::is_valid_task_type;

use crate::{HANDLER_WIT, Language, c, fingerprint, go, javascript};
use crate::{python, rust, zig};

/// The host's verdict on a manifest's text: `Err` holds the message the host would refuse it
/// with. The `spool` binary passes its own manifest parser.
pub type ManifestCheck = fn(&str) -> std::result::Result<(), String>;

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
    /// Checks the project's `NAME.toml` as the host would load it, before anything is built.
    pub check_manifest: ManifestCheck,
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
    let project = std::path::absolute(&request.project).at("cannot resolve", &request.project)?;
    if !project.is_dir() {
        return Err(Error::NotAFolder { path: project });
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
            .ok_or_else(|| Error::UnnamedProject {
                dir: project.clone(),
            })?
            .to_string(),
    };
    if !is_valid_task_type(&task_type) {
        return Err(Error::InvalidTaskType {
            name: task_type,
            build: true,
        });
    }
    // The manifest is checked by the host's own parser before anything is built or written, so
    // a build never deploys a manifest the host would refuse.
    let manifest_source = project.join(format!("{task_type}.toml"));
    if manifest_source.is_file() {
        check_manifest(&manifest_source, request.check_manifest)?;
    }
    let tools = std::path::absolute(&request.tools).at("cannot resolve", &request.tools)?;
    let work = project.join("target").join("spool");
    let wit_dir = work.join("wit");
    std::fs::create_dir_all(&wit_dir).at("cannot create", &wit_dir)?;
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
        .map_err(|source| Error::Build {
            language,
            project: project.clone(),
            source: Box::new(source),
        })?;
        if let Some(sources) = &sources {
            std::fs::write(&record, sources).at("cannot write", &record)?;
        }
    }

    std::fs::create_dir_all(&request.plugins)
        .at("cannot create the plugin folder", &request.plugins)?;
    let wasm = request.plugins.join(format!("{task_type}.wasm"));
    let bytes = std::fs::read(&output).at("the build left no", &output)?;
    write_if_changed(&wasm, &bytes)?;
    let manifest = if manifest_source.is_file() {
        let target = request.plugins.join(format!("{task_type}.toml"));
        let text = std::fs::read(&manifest_source).at("cannot read", &manifest_source)?;
        write_if_changed(&target, &text)?;
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

/// Reads a project's manifest and runs the host's check on it.
fn check_manifest(path: &Path, check: ManifestCheck) -> Result<()> {
    let text = std::fs::read_to_string(path).at("cannot read the manifest", path)?;
    check(&text).map_err(|message| Error::InvalidManifest {
        path: path.to_path_buf(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stands in for the host's parser: knows one field.
    fn only_max_retry(text: &str) -> std::result::Result<(), String> {
        match text.split('=').next().map(str::trim) {
            Some("max_retry") => Ok(()),
            other => Err(format!("unknown field `{}`", other.unwrap_or_default())),
        }
    }

    #[test]
    fn a_manifest_the_host_would_refuse_fails_the_build_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("report");
        std::fs::create_dir(&project).unwrap();
        std::fs::write(project.join("app.py"), "").unwrap();
        let manifest = project.join("report.toml");
        std::fs::write(&manifest, "max_retry = 3\n").unwrap();
        check_manifest(&manifest, only_max_retry).unwrap();

        std::fs::write(&manifest, "max_retyr = 3\n").unwrap();
        let plugins = dir.path().join("plugins");
        let request = BuildRequest {
            project: project.clone(),
            language: None,
            name: None,
            plugins: plugins.clone(),
            tools: dir.path().join("tools"),
            check_manifest: only_max_retry,
        };
        let error = build(&request).unwrap_err();
        assert!(matches!(error, Error::InvalidManifest { .. }), "{error:?}");
        let error = error.to_string();
        assert!(
            error.contains("report.toml: invalid manifest:") && error.contains("max_retyr"),
            "{error}"
        );
        assert!(!plugins.exists() && !project.join("target").exists());
    }

    #[test]
    fn a_folder_name_that_is_no_task_type_asks_for_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("my handler");
        std::fs::create_dir(&project).unwrap();
        std::fs::write(project.join("app.py"), "").unwrap();
        let request = BuildRequest {
            project,
            language: None,
            name: None,
            plugins: dir.path().join("plugins"),
            tools: dir.path().join("tools"),
            check_manifest: only_max_retry,
        };
        let error = build(&request).unwrap_err().to_string();
        assert!(
            error.contains("`my handler` cannot be a task type") && error.contains("--name"),
            "{error}"
        );
    }
}
