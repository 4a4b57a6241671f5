//! The `cachekeeper` command line: `serve` and `check`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cachekeeper::config::{Config, Loaded};
use cachekeeper::route::RouteTable;
use cachekeeper::server::Server;
use cachekeeper::telemetry;

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
        /// Path of proxy.toml.
        #[arg(long, short)]
        config: PathBuf,
        /// Listen address, overriding `[server] listen` (e.g. 127.0.0.1:8787; port 0 = any).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Validate a config and print its routes with their limits.
    Check {
        /// Path of proxy.toml.
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn load(path: &std::path::Path) -> Result<Loaded, ExitCode> {
    match Config::load(path) {
        Ok(l) => Ok(l),
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(2))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Serve { config, listen } => serve(&config, listen),
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    let loaded = match load(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    for w in &loaded.warnings {
        println!("warning: {w}");
    }
    let table = match RouteTable::new(&loaded.config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("config OK: {}", path.display());
    println!("listen: {}", loaded.config.server.listen);
    for r in table.routes() {
        let prefix = if r.prefix.is_empty() {
            "/"
        } else {
            r.prefix.as_str()
        };
        println!(
            "route {:<12} {:<16} -> {}://{}{}  dialect={} dry_run={} max_blocks={} max_blocks_small={} max_bytes={} evict_batch={} evict_floor={}",
            r.name,
            prefix,
            r.scheme,
            r.authority,
            r.base_path,
            r.dialect.map(|d| d.as_str()).unwrap_or("from-path"),
            r.dry_run,
            r.images.max_blocks,
            r.images.max_blocks_small,
            r.images.max_bytes,
            r.images.evict_batch,
            r.images.evict_floor,
        );
    }
    ExitCode::SUCCESS
}

fn serve(path: &std::path::Path, listen: Option<SocketAddr>) -> ExitCode {
    telemetry::init();
    let loaded = match load(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    for w in &loaded.warnings {
        tracing::warn!(target: "cachekeeper::config", "{w}");
    }
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
        let addr = server
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        tracing::info!(target: "cachekeeper::server", listen = %addr, routes = loaded.config.routes.len(), "cachekeeper ready");
        server.run(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
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
