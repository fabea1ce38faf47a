//! `spool deploy`, `spool promote`, `spool rollback`, `spool undeploy` and `spool versions`: deploying handler
//! builds through a running host to every host of its database.

use anyhow::{Context, Result, bail};
use std::path::Path;

use crate::cli::args::{DeployArgs, RollbackArgs, TypeArgs};
use crate::cli::render::deploy::{deployed_summary, deployment_summary, versions_table};

/// Reads a build and its manifest and deploys them; prints what every host now serves.
pub async fn deploy(args: DeployArgs) -> Result<()> {
    let task_type = match &args.task_type {
        Some(name) => name.clone(),
        None => args
            .file
            .file_stem()
            .and_then(|stem| stem.to_str())
            .map(str::to_string)
            .with_context(|| {
                format!(
                    "{}: name the task type with --type NAME",
                    args.file.display()
                )
            })?,
    };
    let deployed = deploy_file(
        &args.client.client(),
        &args.file,
        &task_type,
        args.manifest.as_deref(),
        args.canary,
    )
    .await?;
    print!("{}", deployed_summary(&deployed));
    Ok(())
}

/// Deploys `file` as `task_type`, with the manifest at `manifest` or, without one, the
/// `FILE.toml` beside the build if there is one.
pub async fn deploy_file(
    client: &crate::api::client::Client,
    file: &Path,
    task_type: &str,
    manifest: Option<&Path>,
    canary: Option<u8>,
) -> Result<crate::api::deploy::DeployedView> {
    let component =
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let beside = file.with_extension("toml");
    let manifest_path = match manifest {
        Some(path) => Some(path.to_path_buf()),
        None => beside.exists().then_some(beside),
    };
    let manifest = match &manifest_path {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the manifest {}", path.display()))?,
        ),
        None => None,
    };
    if let Some(path) = &manifest_path {
        eprintln!("with the manifest {}", path.display());
    }
    if component.is_empty() {
        bail!("{} is empty: build the handler first", file.display());
    }
    Ok(client
        .deploy(task_type, component, manifest, canary)
        .await?)
}

pub async fn promote(args: TypeArgs) -> Result<()> {
    let deployment = args.client.client().promote(&args.task_type).await?;
    print!("{}", deployment_summary("promoted", &deployment));
    Ok(())
}

pub async fn rollback(args: RollbackArgs) -> Result<()> {
    let deployment = args
        .client
        .client()
        .rollback(&args.task_type, args.to, args.reason.as_deref())
        .await?;
    print!("{}", deployment_summary("rolled back", &deployment));
    Ok(())
}

pub async fn undeploy(args: TypeArgs) -> Result<()> {
    let deployment = args
        .client
        .client()
        .remove_deployment(&args.task_type)
        .await?;
    println!(
        "{} is no longer served from the database; its versions are kept (spool versions {})",
        deployment.task_type, deployment.task_type
    );
    Ok(())
}

pub async fn versions(args: TypeArgs) -> Result<()> {
    let view = args.client.client().versions(&args.task_type).await?;
    print!("{}", versions_table(&view));
    Ok(())
}
