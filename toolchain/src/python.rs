//! Python handlers: `app.py` with a `WitWorld` class, built into a component by
//! componentize-py. The pinned componentize-py is installed into a virtual environment in
//! the tools folder on first use.
//!
//! A failed build whose app.py defines no `WitWorld` class (or one without `handle`) says so:
//! componentize-py itself only reports that the abstract `WitWorld` cannot be instantiated.
//!
//! componentize-py bundles a CPython interpreter: components are large (~18 MB) and take
//! seconds to compile on first load; the host's compiled-code cache makes every later load
//! take milliseconds.

use std::path::Path;
use std::process::Command;

use crate::build::Recipe;
use crate::error::{Error, Result};
use crate::process::{pip_tool, run};

/// The pinned componentize-py from PyPI.
pub(crate) const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

pub(crate) fn build(recipe: &Recipe) -> Result<()> {
    let bin = pip_tool(
        &recipe.tools.join(COMPONENTIZE_PY.replace("==", "-")),
        COMPONENTIZE_PY,
    )?;
    let built = run(
        Command::new(bin.join("componentize-py"))
            .arg("-d")
            .arg(recipe.wit_dir)
            .args(["-w", "handler", "componentize", "app", "-p"])
            .arg(recipe.project)
            .arg("-o")
            .arg(recipe.output),
        "componentize-py did not install; remove its folder in the tools folder and try again",
    );
    built.map_err(|error| match handler_class_problem(recipe.project) {
        Some(problem) => Error::HandlerClass {
            problem,
            source: Box::new(error),
        },
        None => error,
    })
}

/// What is wrong with app.py's handler class, if that is visible in its source: the class
/// componentize-py instantiates must be named `WitWorld` and define `handle`.
fn handler_class_problem(project: &Path) -> Option<String> {
    let source = std::fs::read_to_string(project.join("app.py")).ok()?;
    let class = source.lines().position(|line| {
        line.strip_prefix("class WitWorld")
            .is_some_and(|rest| rest.starts_with(['(', ':', ' ']))
    });
    let Some(class) = class else {
        let other = source
            .lines()
            .find_map(|line| line.strip_prefix("class "))
            .and_then(|rest| rest.split(['(', ':', ' ']).next())
            .map(|name| format!(" (app.py defines `{name}`)"))
            .unwrap_or_default();
        return Some(format!(
            "the handler class must be named WitWorld{other}: write `class WitWorld(WitWorld):` with a method `def handle(self, task, payload) -> str`"
        ));
    };
    let body = source.lines().skip(class + 1).take_while(|line| {
        line.trim().is_empty() || line.starts_with(' ') || line.starts_with('\t')
    });
    let has_handle = body
        .map(str::trim_start)
        .any(|line| line.starts_with("def handle(") || line.starts_with("async def handle("));
    (!has_handle).then(|| {
        "the WitWorld class in app.py needs a method `def handle(self, task, payload) -> str`"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::handler_class_problem;

    fn problem(source: &str) -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.py"), source).unwrap();
        handler_class_problem(dir.path())
    }

    #[test]
    fn names_what_is_wrong_with_the_handler_class() {
        let named = problem(
            "class Handler(WitWorld):\n    def handle(self, task, payload):\n        return ''\n",
        );
        assert!(
            named.as_deref().is_some_and(|p| p.starts_with(
                "the handler class must be named WitWorld (app.py defines `Handler`)"
            )),
            "{named:?}"
        );
        let method = problem(
            "class WitWorld(WitWorld):\n    def run(self, task, payload):\n        return ''\n",
        );
        assert!(method.is_some_and(|p| p.contains("needs a method `def handle")));
        assert_eq!(
            problem(
                "class WitWorld(WitWorld):\n    @checked\n    def handle(self, task, payload):\n        return ''\n"
            ),
            None
        );
    }
}
