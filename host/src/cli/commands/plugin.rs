//! `spool plugin new` and `spool plugin build`: the handler toolchain (the `spool-toolchain`
//! crate, behind the default-on `toolchain` feature), or, without it, how to get it.

#[cfg(feature = "toolchain")]
use anyhow::Context;
use anyhow::Result;

use crate::cli::PluginCommand;

#[cfg(feature = "toolchain")]
pub fn run(command: PluginCommand) -> Result<()> {
    use spool_toolchain::{BuildRequest, Language};
    match command {
        PluginCommand::New(args) => {
            let language = Language::parse(&args.lang)?;
            let dir = spool_toolchain::new_project(language, &args.name, &args.dir)?;
            println!(
                "created {} ({language}); build it with: spool plugin build {}",
                dir.display(),
                dir.display()
            );
            Ok(())
        }
        PluginCommand::Build(args) => {
            let request = BuildRequest {
                project: args.project,
                language: args.lang.as_deref().map(Language::parse).transpose()?,
                name: args.name,
                plugins: args.plugins,
                tools: args
                    .tools_dir
                    .unwrap_or_else(spool_toolchain::default_tools_dir),
                check_manifest,
            };
            let (deploy, canary) = (args.deploy, args.canary);
            let client = args.client.client();
            let built = spool_toolchain::build(&request)?;
            println!(
                "built {} ({}, {:.1} MB) in {:.1?}{}",
                built.wasm.display(),
                built.language,
                built.size as f64 / 1e6,
                built.elapsed,
                built
                    .manifest
                    .as_ref()
                    .map(|m| format!(", with {}", m.display()))
                    .unwrap_or_default()
            );
            if deploy {
                let runtime =
                    tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
                let task_type = built
                    .wasm
                    .file_stem()
                    .and_then(|stem| stem.to_str())
                    .unwrap_or_default()
                    .to_string();
                let deployed = runtime.block_on(super::deploy::deploy_file(
                    &client,
                    &built.wasm,
                    &task_type,
                    built.manifest.as_deref(),
                    canary,
                ))?;
                print!(
                    "{}",
                    crate::cli::render::deploy::deployed_summary(&deployed)
                );
            }
            Ok(())
        }
    }
}

/// The host's verdict on a project's manifest: a build deploys only what a host would load.
#[cfg(feature = "toolchain")]
fn check_manifest(text: &str) -> Result<(), String> {
    crate::plugins::Manifest::parse(text).map(drop)
}

#[cfg(not(feature = "toolchain"))]
pub fn run(command: PluginCommand) -> Result<()> {
    let name = match command {
        PluginCommand::New(_) => "new",
        PluginCommand::Build(_) => "build",
    };
    anyhow::bail!(
        "this spool was built without the handler toolchain (cargo feature `toolchain`), so it has \
         no `spool plugin {name}`; build handlers with a spool that has it (the default: \
         `cargo build -p spool`), then copy NAME.wasm and NAME.toml into this host's plugin folder"
    )
}

#[cfg(all(test, feature = "toolchain"))]
mod tests {
    #[test]
    fn builds_check_manifests_with_the_hosts_parser() {
        super::check_manifest("max_retry = 3\n").unwrap();
        let error = super::check_manifest("max_retyr = 3\n").unwrap_err();
        assert!(error.contains("max_retyr"), "{error}");
    }
}
