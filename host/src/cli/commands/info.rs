//! What a host shows of itself: `types`, `plugins`, `schedules`, `health`, `alert show`, and
//! `alert drill`, which runs a drill and reports each channel.

use anyhow::{Result, bail};

use crate::cli::args::{ClientArgs, PluginsArgs, SchedulesArgs, TypesArgs};
use crate::cli::render::host::{
    drill_report, find_plugin, plugin_detail, plugins_table, schedules_table, types_table,
};
use crate::cli::render::print_json;

pub async fn types(args: TypesArgs) -> Result<()> {
    let types = args.client.client().types().await?;
    if args.json {
        print_json(&types)
    } else {
        print!("{}", types_table(&types));
        Ok(())
    }
}

pub async fn plugins(args: PluginsArgs) -> Result<()> {
    let plugins = args.client.client().plugins().await?;
    match (&args.name, args.json) {
        (Some(name), json) => {
            let plugin = find_plugin(&plugins, name)?;
            if json {
                print_json(&plugin)
            } else {
                print!("{}", plugin_detail(&plugin)?);
                Ok(())
            }
        }
        (None, true) => print_json(&plugins),
        (None, false) => {
            print!("{}", plugins_table(&plugins));
            Ok(())
        }
    }
}

pub async fn schedules(args: SchedulesArgs) -> Result<()> {
    let schedules = args.client.client().schedules().await?;
    if args.json {
        print_json(&schedules)
    } else {
        print!("{}", schedules_table(&schedules));
        Ok(())
    }
}

pub async fn health(args: ClientArgs) -> Result<()> {
    print_json(&args.client().health().await?)
}

pub async fn alerts(args: ClientArgs) -> Result<()> {
    print_json(&args.client().alerts().await?)
}

/// Runs the alert drill and prints each channel's outcome; fails loudly when one failed.
pub async fn drill(args: ClientArgs) -> Result<()> {
    let answer = args.client().drill().await?;
    print!("{}", drill_report(&answer.report));
    if !answer.report.ok {
        bail!(
            "{}",
            answer
                .failure
                .as_deref()
                .unwrap_or("the alert drill failed: a channel did not take the test alert")
        );
    }
    println!("every channel took the test alert");
    Ok(())
}
