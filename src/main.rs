//! The `cachekeeper` command line: `serve`, `check`, `verdicts`, `state`
//! ([`cachekeeper::cli::state`]), `replay` ([`cachekeeper::cli::replay`]) and `report`
//! ([`cachekeeper::cli::report`]).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_macros,
    reason = "the binary's entry: prints the CLI's output and startup errors, blocks on the runtime it starts"
)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cachekeeper::config::Loaded;
use cachekeeper::proxy::Server;
use cachekeeper::route::RouteTable;
use cachekeeper::{outln, state, telemetry};

/// The process's allocator: mimalloc, not the system's (glibc malloc). Measured with
/// `benches/instructions.py` (callgrind, instructions per request): POST 339 k -> 303 k, SSE
/// 444 k -> 400 k, GET 110 k -> 105 k (docs/performance.md, 2026-12-05).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "cachekeeper",
    version,
    about = "Reverse proxy that keeps LLM prompt caches warm"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Serve {
        /// Path of proxy.toml. Default: ./proxy.toml, else proxy.toml in the platform's
        /// config directory (`$XDG_CONFIG_HOME/cachekeeper/` or `~/.config/cachekeeper/` on
        /// Linux, `~/Library/Application Support/cachekeeper/` on macOS).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Log lines: `auto` (a compact human line when stderr is a terminal, JSON lines
        /// otherwise), `json`, or `pretty` (several lines per event).
        #[arg(long, value_enum, default_value_t = telemetry::LogFormat::Auto)]
        log_format: telemetry::LogFormat,
        /// Listen address, overriding `[server] listen` (e.g. 127.0.0.1:8787; port 0 = any).
        #[arg(long, value_parser = cachekeeper::config::parse_listen)]
        listen: Option<SocketAddr>,
        /// Append every buffered generation request a route receives to FILE, one
        /// `cachekeeper replay` line each. The file holds prompts and images in clear; it is
        /// created mode 0600. Off by default.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
    /// Validate a config and print its routes, in config order, with their profiles and
    /// limits.
    Check {
        /// Path of proxy.toml (default: as for `serve`).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// List the verdicts learned from providers (unknown fields, rejected `anthropic-beta`
    /// values, models without image input, restore off), or clear some.
    ///
    /// A running proxy notices a clear within a few seconds.
    Verdicts {
        /// Path of proxy.toml (its `[state] path` names the database; default: as for
        /// `serve`).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Remove the verdicts for HOST (all models), or for HOST and MODEL.
        #[arg(long, num_args = 1..=2, value_names = ["HOST", "MODEL"])]
        clear: Option<Vec<String>>,
    },
    /// Show what the state store holds (counts, bytes and ages per kind, host and model;
    /// never content), or delete records with --purge.
    ///
    /// A running proxy notices a purge within a few seconds.
    State(cachekeeper::cli::state::StateArgs),
    /// Replay a recorded session offline: the cache reads and writes of the session as sent,
    /// as cachekeeper would forward it, and under a keep-newest-3-images policy, under an
    /// exact-prefix model of the route's provider cache (docs/replay.md).
    Replay(cachekeeper::cli::replay::ReplayArgs),
    /// Per session: turns, uncached / cache-read / cache-write / output tokens, cache-read
    /// share, prefix collapses by cause, billed-input equivalents and the saving against no
    /// cache; --session ID for one session's turns, --json for scripts.
    Report(cachekeeper::cli::report::ReportArgs),
}

fn load(path: &std::path::Path) -> Result<Loaded, ExitCode> {
    cachekeeper::cli::load_config(path)
}

/// The config path: `--config`, else the first of `./proxy.toml` and the platform config
/// directory's that exists ([`cachekeeper::cli::config_path`], shared by every subcommand).
fn config_path(explicit: Option<PathBuf>) -> Result<PathBuf, ExitCode> {
    cachekeeper::cli::config_path(explicit.as_deref())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => match config_path(config) {
            Ok(path) => check(&path),
            Err(code) => code,
        },
        Command::Serve {
            config,
            log_format,
            listen,
            record,
        } => serve(config, log_format, listen, record.as_deref()),
        Command::Verdicts { config, clear } => {
            match cachekeeper::cli::find_config(config.as_deref()) {
                Ok(path) => verdicts(&path, clear.as_deref()),
                Err(code) => code,
            }
        }
        Command::State(args) => cachekeeper::cli::state::run(&args),
        Command::Replay(args) => cachekeeper::cli::replay::run(&args),
        Command::Report(args) => cachekeeper::cli::report::run(&args),
    }
}

fn verdicts(path: &std::path::Path, clear: Option<&[String]>) -> ExitCode {
    let loaded = match load(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let opts = state::StoreOptions::from_config(&loaded.config.state, &loaded.base_dir);
    if opts.redis.is_none() && !opts.path.exists() {
        outln!(
            "no verdicts (no state database at {} yet)",
            opts.path.display()
        );
        return ExitCode::SUCCESS;
    }
    let store = match state::Store::open_strict(&opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot open state database {}: {e}", opts.location());
            return ExitCode::FAILURE;
        }
    };
    if let Some(args) = clear {
        let host = args.first().map(String::as_str).unwrap_or_default();
        let model = args.get(1).map(String::as_str);
        let n = store.verdicts().clear(host, model);
        store.flush();
        if !store.is_durable() {
            eprintln!("error: could not write {}", opts.location());
            return ExitCode::FAILURE;
        }
        outln!(
            "removed {n} verdict(s) for {host}{}",
            model.map(|m| format!(" / {m}")).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let all = store.verdicts().all();
    if all.is_empty() {
        outln!("no verdicts in {}", opts.location());
        return ExitCode::SUCCESS;
    }
    // One line per (host, model): host, model, fields (`message:…` / `param:…` /
    // `beta:…` / `model:image_input` / `model:no_restore`), when learned, the provider's
    // wording.
    for (k, v) in all {
        outln!(
            "{}\t{}\t{}\t{}\t{}",
            k.host,
            k.model,
            v.fields.joined(),
            format_time(v.learned_at),
            v.wording.replace(['\n', '\t'], " ")
        );
    }
    ExitCode::SUCCESS
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC; civil-from-days, Howard Hinnant's algorithm).
fn format_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn check(path: &std::path::Path) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match check_to(path, &mut out).and_then(|code| out.flush().map(|()| code)) {
        Ok(code) => code,
        // The reader went away (`check | head -1`): what it read is all it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `check`'s report on `out`: warnings, then one line per route in the config file's order.
/// Errors: writing to `out` failed.
fn check_to(path: &std::path::Path, out: &mut impl Write) -> std::io::Result<ExitCode> {
    let loaded = match load(path) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    for w in &loaded.warnings {
        writeln!(out, "warning: {w}")?;
    }
    let server = &loaded.config.server;
    if let Some(w) = cachekeeper::exposure_warning(server.listen, server.client_token.is_some()) {
        writeln!(out, "warning: {w}")?;
    }
    if let Some(e) = loaded.config.lending_refusal(server.listen) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    let table = match RouteTable::new(&loaded.config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let ca = loaded
        .config
        .server
        .ca_file
        .as_ref()
        .map(|p| loaded.base_dir.join(p));
    if let Err(e) = cachekeeper::wire::upstream::build_client(
        std::time::Duration::from_millis(loaded.config.server.connect_timeout_ms),
        ca.as_deref(),
    ) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    writeln!(out, "config OK: {}", path.display())?;
    writeln!(out, "listen: {}", loaded.config.server.listen)?;
    // A Redis URL is printed redacted (`RedisUrl`'s Display).
    writeln!(
        out,
        "state: {}",
        loaded.config.state.describe(&loaded.base_dir)
    )?;
    // Config order (the table itself is sorted longest prefix first, for matching).
    let ordered = loaded
        .config
        .routes
        .iter()
        .filter_map(|c| table.routes().iter().find(|r| r.name == c.name));
    for r in ordered {
        let prefix = if r.prefix.is_empty() {
            "/"
        } else {
            r.prefix.as_str()
        };
        let provider = &r.provider;
        let carriers: Vec<&str> = provider.carriers.iter().map(|c| c.field()).collect();
        if !provider.unknown_carrier_names.is_empty() {
            writeln!(
                out,
                "warning: route {}: unknown carrier names {:?}",
                r.name, provider.unknown_carrier_names
            )?;
        }
        writeln!(
            out,
            "route {:<12} {:<16} -> {}://{}{}  profile={} matched_by={:?} carriers=[{}] thinking={:?} images={} cache={} breakpoints={} cache_ttl={} stabilize=[{}] dialect={} dry_run={} max_blocks={} max_blocks_small={} max_bytes={} evict_batch={} evict_floor={} evict_low_water={} cold_eviction={}",
            r.name,
            prefix,
            r.scheme,
            r.authority,
            r.base_path,
            provider.row.name,
            provider.matched_by,
            carriers.join(","),
            provider.row.thinking,
            provider.images.map(|l| l.name).unwrap_or("from-model"),
            cache_summary(provider.row.cache),
            r.cache.breakpoints.as_str(),
            r.cache.ttl.map_or("unset", |t| t.as_str()),
            r.cache
                .stabilize
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
            r.dialect.map(|d| d.as_str()).unwrap_or("from-path"),
            r.dry_run,
            r.images.max_blocks,
            r.images.max_blocks_small,
            r.images.max_bytes,
            r.images.evict_batch,
            r.images.evict_floor,
            r.images
                .evict_low_water
                .map_or_else(|| "half".to_owned(), |v| v.to_string()),
            r.images.cold_eviction,
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `check`'s one-word view of a row's prompt-cache rules: `model-prefix:ttl/write/read` per
/// rule (`?` where not published), or `none`.
fn cache_summary(rules: &[cachekeeper::provider::CacheRule]) -> String {
    if rules.is_empty() {
        return "none".to_owned();
    }
    let x = |v: Option<u32>, unit: &str| v.map_or_else(|| "?".to_owned(), |v| format!("{v}{unit}"));
    let milli = |v: Option<u32>| {
        v.map_or_else(|| "?".to_owned(), |v| format!("{}x", f64::from(v) / 1000.0))
    };
    rules
        .iter()
        .map(|r| {
            format!(
                "{}:{}/{}/{}",
                if r.models.is_empty() { "*" } else { r.models },
                x(r.ttl_s, "s"),
                milli(r.write_milli),
                milli(r.read_milli)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn serve(
    config: Option<PathBuf>,
    log_format: telemetry::LogFormat,
    listen: Option<SocketAddr>,
    record: Option<&std::path::Path>,
) -> ExitCode {
    // Held until `serve` returns: the lines still queued are written then.
    let (_, _log) = telemetry::init_with(log_format);
    let path = match config_path(config) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let path = path.as_path();
    let loaded = match load(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let shown = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    tracing::info!(target: "cachekeeper::config", file = %shown.display(), "config loaded");
    for w in &loaded.warnings {
        tracing::warn!(target: "cachekeeper::config", "{w}");
    }
    raise_open_file_limit();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let server = match Server::bind(&loaded, listen).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let server = match record {
            None => server,
            Some(file) => match server.record_to(file) {
                Ok(s) => {
                    tracing::warn!(target: "cachekeeper::server", file = %file.display(), "recording every generation request (prompts and images in clear)");
                    s
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            },
        };
        let addr = server
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        tracing::info!(target: "cachekeeper::server", listen = %addr, routes = loaded.config.routes.len(), "cachekeeper ready");
        reload_on_sighup(server.reloader(), path.to_path_buf());
        server.run(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}

/// Raise the open-file soft limit to the hard limit the OS allows: every client connection
/// and every pooled upstream connection is a file descriptor, and many systems start processes
/// with a soft limit of 1,024. Logs the change; a refusal is a warning (the proxy serves with
/// the limit it has).
fn raise_open_file_limit() {
    let before = rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(soft, _)| soft);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(now) => match before {
            Ok(was) if was != now => {
                tracing::info!(target: "cachekeeper::server", from = was, to = now, "raised the open-file limit")
            }
            _ => tracing::debug!(target: "cachekeeper::server", limit = now, "open-file limit"),
        },
        Err(e) => {
            tracing::warn!(target: "cachekeeper::server", error = %e, "could not raise the open-file limit")
        }
    }
}

/// On every `SIGHUP`, reload `path` ([`cachekeeper::proxy::Reloader::reload_logged`]: a bad
/// file is logged and the running configuration kept).
fn reload_on_sighup(reloader: cachekeeper::proxy::Reloader, path: PathBuf) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(target: "cachekeeper::config", error = %e, "cannot listen for SIGHUP; reload by restarting");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let (r, p) = (reloader.clone(), path.clone());
            // Reading the file and the CA bundle is blocking I/O.
            let _ = tokio::task::spawn_blocking(move || r.reload_logged(&p)).await;
        }
    });
    #[cfg(not(unix))]
    let _ = (reloader, path);
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
