use super::*;
use clap::{Args, CommandFactory, FromArgMatches};

/// The settings clap reads from `args` (and this process's environment), as `spool serve` does.
fn flags(args: &[&str]) -> Result<Settings, clap::Error> {
    let matches = Settings::augment_args(clap::Command::new("serve"))
        .try_get_matches_from(std::iter::once("serve").chain(args.iter().copied()))?;
    let mut settings = Settings::from_arg_matches(&matches)?;
    settings.note_command_line(&matches);
    Ok(settings)
}

/// The settings of a spool.toml holding `text`.
fn file(text: &str) -> Result<Settings, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.toml");
    std::fs::write(&path, text).unwrap();
    Settings::from_file(&path, true)
}

/// The message a configuration is refused with.
fn refused(settings: Settings) -> String {
    Config::from_settings(settings).unwrap_err().to_string()
}

#[test]
fn defaults_apply() {
    let config = Config::from_settings(Settings::default()).unwrap();
    assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
    assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
    assert!(config.listen.ip().is_loopback());
    assert_eq!(config.defaults(), Defaults::default());
    assert_eq!(config.defaults().backoff.base, Duration::from_secs(30));
    assert!(config.concurrency >= 4);
    assert_eq!(config.api_token, None);
    assert_eq!(config.max_payload, 1 << 20);
    assert_eq!(config.retention(), Some(Retention::default()));
    assert_eq!(
        config.grants_root,
        Path::new("plugin-data"),
        "beside the plugin folder"
    );
}

#[test]
fn the_sqlite_file_is_found_in_the_url() {
    let config = |url: &str| {
        Config::from_settings(Settings {
            database_url: Some(url.into()),
            ..Default::default()
        })
        .unwrap()
    };
    assert_eq!(
        config("sqlite://spool.db").sqlite_file(),
        Some(PathBuf::from("spool.db"))
    );
    assert_eq!(
        config("sqlite:///var/lib/spool/q.db?mode=rwc").sqlite_file(),
        Some(PathBuf::from("/var/lib/spool/q.db"))
    );
    assert_eq!(config("sqlite::memory:").sqlite_file(), None);
    assert_eq!(config("postgres://u@db/spool").sqlite_file(), None);
}

#[test]
fn the_grants_root_defaults_beside_the_plugin_folder() {
    assert_eq!(
        default_grants_root(Path::new("/srv/spool/plugins")),
        Path::new("/srv/spool/plugin-data")
    );
    assert_eq!(
        default_grants_root(Path::new("/srv/spool/plugins/")),
        Path::new("/srv/spool/plugin-data")
    );
    assert_eq!(
        default_grants_root(Path::new("deploy/plugins")),
        Path::new("deploy/plugin-data")
    );
    assert_eq!(
        default_grants_root(Path::new(".")),
        Path::new("./../plugin-data")
    );
    let config = Config::from_settings(flags(&["--plugins", "/p/wasm"]).unwrap()).unwrap();
    assert_eq!(config.grants_root, Path::new("/p/plugin-data"));
    let config =
        Config::from_settings(file("grants_root = \"/var/lib/spool/data\"").unwrap()).unwrap();
    assert_eq!(config.grants_root, Path::new("/var/lib/spool/data"));
}

#[test]
fn flags_win_over_the_file_and_the_file_over_defaults() {
    let from_file = file("concurrency = 3\npoll_interval = \"250ms\"\nmax_retry = 7").unwrap();
    let from_flags = flags(&["--concurrency", "9"]).unwrap();
    let config = Config::from_settings(from_flags.or(from_file)).unwrap();
    assert_eq!(config.concurrency, 9);
    assert_eq!(config.poll_interval, Duration::from_millis(250));
    assert_eq!(config.max_retry, 7);
    assert_eq!(config.rescue_interval, DEFAULT_RESCUE_INTERVAL);
}

/// Set in the child process [`the_environment_sits_between_flags_and_the_file`] starts.
const CHILD: &str = "SPOOL_CONFIG_TESTS_CHILD";

/// Environment variables are read by clap from the process, so this test runs its checks in a
/// child process of this test binary with the variables set (the parent's environment, which
/// other tests share, is never changed).
#[test]
fn the_environment_sits_between_flags_and_the_file() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "config::tests::precedence_in_a_child",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1");
    for setting in SETTINGS {
        child.env_remove(setting.env);
    }
    let output = child
        .env("SPOOL_CONCURRENCY", "5")
        .env("SPOOL_LEASE", "40s")
        .env("SPOOL_MAX_BATCH", "0")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("1 passed"), "the child ran the checks: {out}");
}

/// The checks of [`the_environment_sits_between_flags_and_the_file`]; passes at once unless
/// run as its child.
#[test]
fn precedence_in_a_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let from_file =
        file("concurrency = 3\nlease = \"20s\"\npoll_interval = \"2s\"\nmax_batch = 5").unwrap();
    let from_flags = flags(&["--concurrency", "9", "--max-batch", "7"]).unwrap();
    let config = Config::from_settings(from_flags.or(from_file.clone())).unwrap();
    assert_eq!(config.concurrency, 9, "a flag over a variable");
    assert_eq!(
        config.lease,
        Duration::from_secs(40),
        "a variable over the file"
    );
    assert_eq!(
        config.poll_interval,
        Duration::from_secs(2),
        "the file over defaults"
    );
    assert_eq!(config.rescue_interval, DEFAULT_RESCUE_INTERVAL, "a default");
    let message = refused(flags(&[]).unwrap().or(from_file));
    assert_eq!(
        message,
        "configuration error: setting `max_batch` (SPOOL_MAX_BATCH): must be at least 1, got 0"
    );
}

#[test]
fn every_rule_names_the_setting_and_where_its_value_came_from() {
    for (args, message) in [
        (
            &["--concurrency", "0"][..],
            "setting `concurrency` (--concurrency): must be at least 1, got 0",
        ),
        (
            &["--max-connections", "0"],
            "setting `max_connections` (--max-connections): must be at least 1, got 0",
        ),
        (
            &["--poll-interval", "0s"],
            "setting `poll_interval` (--poll-interval): must be longer than zero, got 0s",
        ),
        (
            &["--max-wait", "2m"],
            "setting `max_wait` (--max-wait): must be longer than zero and at most 1m, got 2m",
        ),
        (
            &["--max-payload", "huge"],
            "setting `max_payload` (--max-payload): `huge` is not a size: write a number with KiB, MiB or GiB",
        ),
        (
            &["--memory", "1TB"],
            "setting `memory` (--memory): unknown size unit `TB` in `1TB`: use KiB, MiB or GiB",
        ),
        (
            &["--memory", "32GiB"],
            "setting `memory` (--memory): must be a size from 64KiB to 16GiB, got 32GiB",
        ),
        (
            &["--max-retry", "1001"],
            "setting `max_retry` (--max-retry): must be at most 1000, got 1001",
        ),
        (
            &["--timeout", "8d"],
            "setting `timeout` (--timeout): must be a positive duration of at most 7d, got 8d",
        ),
        (
            &["--backoff-max", "400d"],
            "setting `backoff_max` (--backoff-max): must be a duration from 1ms to 365d, got 400d",
        ),
        (
            &["--effect-retention", "10m"],
            "setting `effect_retention` (--effect-retention): must be a duration from 1h to 10 years, got 10m",
        ),
        (
            &["--kv-max-keys", "0"],
            "setting `kv_max_keys` (--kv-max-keys): must be 1 or more, got 0",
        ),
        (
            &["--allowed-hosts", "spool.test:port"],
            "setting `allowed_hosts` (--allowed-hosts): `spool.test:port` is not a host name; write NAME or NAME:PORT",
        ),
        (
            &["--backoff-jitter", "1.5"],
            "setting `backoff_jitter` (--backoff-jitter): must be a fraction from 0 to 1, got 1.5",
        ),
        (
            &["--allowed-hosts", "spool.test,http://x"],
            "setting `allowed_hosts` (--allowed-hosts): `http://x` is not a host name; write NAME or NAME:PORT",
        ),
        (
            &["--read-token", "r"],
            "setting `read_token` (--read-token): needs api_token as well",
        ),
        (
            &["--listen", "0.0.0.0:8787"],
            "setting `listen` (--listen): 0.0.0.0:8787 is reachable from other machines, and without api_token anyone",
        ),
        (
            &["--listen", "[::]:8787", "--read-token", "r"],
            "setting `read_token` (--read-token): needs api_token as well",
        ),
        (
            &["--max-payload", "32MiB"],
            "setting `max_body` (the default): must be at least max_payload (32MiB), got 16MiB",
        ),
        (
            &["--archive-retention", "0s"],
            "setting `archive_retention` (--archive-retention): must be longer than zero; to keep every task, set archive = false",
        ),
    ] {
        let error = refused(flags(args).unwrap());
        assert!(
            error.starts_with(&format!("configuration error: {message}")),
            "{args:?}: {error}"
        );
    }

    let error = refused(file("# limits\n\nmax_batch = 0\n").unwrap());
    assert!(
        error.contains("setting `max_batch` (")
            && error.ends_with("spool.toml line 3): must be at least 1, got 0"),
        "{error}"
    );
    let error = refused(Settings {
        concurrency: Some(0),
        ..Default::default()
    });
    assert_eq!(
        error,
        "configuration error: setting `concurrency` (--concurrency / SPOOL_CONCURRENCY / concurrency in spool.toml): must be at least 1, got 0"
    );
}

#[test]
fn related_settings_are_checked_together() {
    let config = Config::from_settings(
        file("api_token = \"w\"\nread_token = \"r\"\nallowed_hosts = [\"Spool.Internal\"]")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (config.read_token.as_deref(), config.allowed_hosts),
        (Some("r"), vec!["spool.internal".to_string()])
    );
    let config = Config::from_settings(flags(&["--api-token", ""]).unwrap()).unwrap();
    assert_eq!(config.api_token, None, "an empty token is none");
    // With archiving off, its ages are not used and not checked.
    let config =
        Config::from_settings(flags(&["--archive", "false", "--archive-after", "0s"]).unwrap())
            .unwrap();
    assert_eq!(config.retention(), None);
    let config = Config::from_settings(file("archive_after = \"7d\"").unwrap()).unwrap();
    assert_eq!(
        config.retention().unwrap().after,
        Duration::from_secs(7 * 86_400)
    );
}

#[test]
fn unknown_settings_are_refused() {
    let error = file("concurrency = 2\nconcurency = 3")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("unknown field `concurency`") && error.contains("line 2"),
        "{error}"
    );
    let error = flags(&["--concurency", "3"]).unwrap_err().to_string();
    assert!(error.contains("--concurency"), "{error}");
}

#[test]
fn durations_and_sizes_read_alike_from_flags_and_the_file() {
    let config = Config::from_settings(
        flags(&[
            "--poll-interval",
            "250ms",
            "--max-payload",
            "2MiB",
            "--max-body",
            "4MiB",
        ])
        .unwrap(),
    )
    .unwrap();
    assert_eq!(config.poll_interval, Duration::from_millis(250));
    assert_eq!((config.max_payload, config.max_body), (2 << 20, 4 << 20));
    let config = Config::from_settings(
        file("effect_retention = \"30d\"\nkv_max_bytes = \"64KiB\"\nmax_result = \"1024\"")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(config.effect_retention, Duration::from_secs(30 * 86_400));
    assert_eq!((config.kv_max_bytes, config.max_result), (64 << 10, 1024));

    let error = file("\npoll_interval = \"soon\"").unwrap_err().to_string();
    assert!(
        error.contains("line 2") && error.contains("poll_interval"),
        "{error}"
    );
    let error = flags(&["--poll-interval", "soon"]).unwrap_err().to_string();
    assert!(error.contains("--poll-interval"), "{error}");
}

#[test]
fn every_setting_is_a_flag_a_variable_and_a_key_with_its_default_in_the_help() {
    let command = Settings::augment_args(clap::Command::new("serve"));
    let flat: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.get_id() != "help")
        .collect();
    assert_eq!(flat.len(), SETTINGS.len(), "every flag is a listed setting");
    for (arg, setting) in flat.into_iter().zip(SETTINGS) {
        assert_eq!(arg.get_id(), setting.name);
        assert_eq!(
            format!("--{}", arg.get_long().unwrap()),
            setting.flag(),
            "{}",
            setting.name
        );
        assert_eq!(
            arg.get_env().and_then(|env| env.to_str()),
            Some(setting.env)
        );
        assert_eq!(
            setting.env,
            format!("SPOOL_{}", setting.name.to_uppercase()),
            "variables are named after their setting"
        );
        let help = arg.get_help().unwrap().to_string();
        assert_eq!(
            help,
            format!("{} [default: {}]", setting.help(), (setting.shown)())
        );
    }
}

#[test]
fn every_default_as_shown_reads_back_as_itself() {
    let mut args = Vec::new();
    for setting in SETTINGS {
        let value = match setting.name {
            // Defaults in words: a value of the same kind instead.
            "concurrency" => "4".to_string(),
            "allowed_hosts" => "spool.test".to_string(),
            "api_token" | "read_token" | "deploy_token" => "token".to_string(),
            "grants_root" => "plugin-data".to_string(),
            _ => (setting.shown)(),
        };
        args.extend([setting.flag(), value]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let given = Config::from_settings(flags(&args).unwrap()).unwrap();
    let defaults = Config::from_settings(Settings::default()).unwrap();
    assert_eq!(given.defaults(), defaults.defaults());
    assert_eq!(given.retention(), defaults.retention());
    assert_eq!(
        format!("{given:?}")
            .replace("concurrency: 4,", "")
            .replace("[\"spool.test\"]", "[]")
            .replace("Some(\"token\")", "None"),
        format!("{defaults:?}").replace(&format!("concurrency: {},", defaults.concurrency), ""),
    );
}

#[test]
fn the_serve_help_shows_every_default() {
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        settings: Settings,
    }
    let help = Serve::command().render_help().to_string();
    for (flag, default) in [
        ("--poll-interval", "[default: 1s]"),
        ("--lease", "[default: 1m]"),
        ("--max-payload", "[default: 1MiB]"),
        ("--archive-retention", "[default: 365d]"),
        ("--concurrency", "[default: 8 × CPU cores]"),
        ("--api-token", "[default: none]"),
        ("--fuel", "[default: 10000000000]"),
    ] {
        // A flag's entry: its line and the indented help lines below it.
        let entry: Vec<&str> = help
            .lines()
            .skip_while(|line| !line.trim_start().starts_with(&format!("{flag} <")))
            .take_while({
                let mut first = true;
                move |line| std::mem::take(&mut first) || !line.trim_start().starts_with('-')
            })
            .flat_map(|line| line.split_whitespace())
            .collect();
        let entry = entry.join(" ");
        assert!(entry.contains(default), "{flag}: {entry}\n{help}");
    }
}

/// The table of docs/configuration.md, as the settings above describe it.
fn docs_table() -> String {
    let mut table = String::from(
        "| setting (spool.toml) | flag | environment | default | what |\n|---|---|---|---|---|\n",
    );
    for setting in SETTINGS {
        table += &format!(
            "| `{}` | `{}` | `{}` | {} | {} |\n",
            setting.name,
            setting.flag(),
            setting.env,
            (setting.shown)(),
            setting.help()
        );
    }
    table
}

#[test]
fn the_docs_list_every_setting_as_defined() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let docs = std::fs::read_to_string(path).unwrap();
    let (begin, end) = ("<!-- settings: begin -->\n", "<!-- settings: end -->");
    let listed = docs
        .split_once(begin)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(table, _)| table)
        .expect("docs/configuration.md marks its table of settings");
    let expected = docs_table();
    assert!(
        listed == expected,
        "docs/configuration.md lists other settings than host/src/config/mod.rs defines; \
         replace its table with:\n{expected}"
    );
}

#[test]
fn settings_turn_archiving_off_or_change_its_ages() {
    let retention = |settings: Settings| -> Result<Option<Retention>, ConfigError> {
        Ok(Config::from_settings(settings)?.retention())
    };
    let off = Settings {
        archive: Some(false),
        ..Default::default()
    };
    assert_eq!(retention(off).unwrap(), None);
    assert_eq!(
        retention(Settings::default()).unwrap(),
        Some(Retention::default())
    );
    let file: Settings =
        toml::from_str("archive_after = \"7d\"\ndead_letter_retention = \"30d\"").unwrap();
    let days = |n: u64| Duration::from_secs(n * 86_400);
    assert_eq!(
        retention(file).unwrap(),
        Some(Retention {
            after: days(7),
            dead_letters: days(30),
            archive: days(365),
        })
    );
    let zero: Settings = toml::from_str("archive_retention = \"0s\"").unwrap();
    let error = retention(zero).unwrap_err().to_string();
    assert!(
        error.contains("archive_retention") && error.contains("archive = false"),
        "{error}"
    );
}

#[test]
fn defaults_take_the_same_ranges_as_manifests_and_requests() {
    let config = Config::from_settings(
        flags(&[
            "--max-retry",
            "1000",
            "--memory",
            "16GiB",
            "--timeout",
            "7d",
            "--backoff-base",
            "1ms",
            "--backoff-max",
            "365d",
            "--effect-retention",
            "1h",
        ])
        .unwrap(),
    )
    .unwrap();
    let limits = (spool_rules::limits::MAX_RETRY, spool_rules::limits::MEMORY);
    assert_eq!(config.max_retry, limits.0.max);
    assert_eq!(config.memory, limits.1.max);
    let manifest = crate::plugins::Manifest::parse(
        "max_retry = 1000\nmemory = \"16GiB\"\ntimeout = \"7d\"\nbackoff_base = \"1ms\"\nbackoff_max = \"365d\"\n[effects]\nretention = \"1h\"\n",
    );
    assert!(manifest.is_ok(), "{manifest:?}");
}

#[test]
fn a_listen_address_beyond_loopback_needs_a_token_or_open_api() {
    for args in [
        &["--listen", "0.0.0.0:8787", "--api-token", "w"][..],
        &["--listen", "10.1.2.3:8787", "--open-api", "true"],
        &["--listen", "127.0.0.2:8787"],
        &["--listen", "[::1]:8787"],
    ] {
        let config = Config::from_settings(flags(args).unwrap());
        assert!(config.is_ok(), "{args:?}: {:?}", config.err());
    }
}
