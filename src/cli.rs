//! The command line: `serve`, `worker`, `reaper`, `migrate`, `model init`, `inference check`,
//! `token …`, `script-host`, and the client commands of [`crate::client`] (`submit`, `status`, `ls`, …). SIGTERM or SIGINT stops a
//! process gracefully (see `actors::ShutdownGuard`); it then exits with 143. The `yardmaster` binary calls
//! [`main_with`] with the built-in operations; an application with operations of its own
//! calls it with its registry (see `examples/custom_operation.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory as _, Parser, Subcommand};

use crate::auth::commands::TokenCommand;
use crate::client::commands::ClientCommand;
use crate::ops::OperationRegistry;
use crate::{store, telemetry, Application, Settings};

/// Durable job orchestration: submit jobs over HTTP, run them on workers, see every state change.
#[derive(Debug, Parser)]
#[command(name = "yardmaster", version)]
struct Cli {
    /// Settings file (TOML). Default: ./config.toml when it exists. Every setting can also be
    /// set by environment, e.g. YARDMASTER__STORE__URL.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API and, unless --no-workers, run the queue consumers.
    Serve(ServeArgs),
    /// Run queue consumers only (no HTTP API): a worker process, e.g. on another host.
    Worker(WorkerArgs),
    /// Run the reaper and the dispatch sweep only: rescue jobs whose worker died.
    Reaper,
    /// Apply pending database migrations and exit.
    Migrate,
    /// The inference model.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Inference on this host.
    #[command(subcommand)]
    Inference(InferenceCommand),
    /// API tokens: create, list, revoke (on the store directly; no server needed).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Run uploaded scripts on this host for a server elsewhere, over HTTP only (no shared
    /// files, no database): a remote worker with a `worker` token in YARDMASTER_TOKEN.
    ScriptHost(ScriptHostArgs),
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Debug, Args)]
struct ScriptHostArgs {
    /// The server, e.g. https://jobs.example.com.
    #[arg(long, value_name = "URL")]
    url: String,

    /// An upload service to run; repeat for several.
    #[arg(long = "service", value_name = "NAME", required = true)]
    services: Vec<String>,

    /// Scripts run at once.
    #[arg(long, default_value_t = 2)]
    slots: usize,

    /// Where uploads are fetched to and run (each run's directory is removed after it).
    #[arg(long, value_name = "DIR", default_value = "data/script-host")]
    dir: PathBuf,

    /// A name for people (default: the token's user).
    #[arg(long)]
    name: Option<String>,

    /// Seconds runs get to finish after SIGTERM before they are killed and handed back.
    #[arg(long, default_value_t = 30)]
    grace_seconds: u64,
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// Write the default model (a small deterministic text encoder, traced to TorchScript)
    /// to inference.model, unless a file is there already.
    Init(ModelInitArgs),
}

#[derive(Debug, Subcommand)]
enum InferenceCommand {
    /// Print the device the model would run on, libtorch's and CUDA's versions, and time a
    /// forward pass of inference.model (exit 1 when it cannot load or answer).
    Check,
}

#[derive(Debug, Args)]
struct ModelInitArgs {
    /// Where to write it (default: inference.model of the settings).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Replace a file that is already there.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct WorkerArgs {
    /// Queue to consume; repeat for several. Settings come from [queues.NAME] when present,
    /// else concurrency 1, prefetch 1. Default: every queue in the configuration.
    #[arg(long = "queue", value_name = "NAME")]
    queues: Vec<String>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on, e.g. 127.0.0.1:8080 (overrides server.bind).
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,

    /// Serve the API only; run no queue consumers in this process.
    #[arg(long)]
    no_workers: bool,
}

#[cfg(feature = "inference")]
fn model_init(path: &std::path::Path, vocab: u32, force: bool) -> anyhow::Result<i32> {
    if path.exists() && !force {
        println!("model {} is already there (--force replaces it)", path.display());
        return Ok(0);
    }
    crate::inference::model::write_default(path, vocab)
        .map_err(|err| anyhow::anyhow!("writing the default model to {}: {err}", path.display()))?;
    println!("wrote the default model to {}", path.display());
    Ok(0)
}

#[cfg(not(feature = "inference"))]
fn model_init(_path: &std::path::Path, _vocab: u32, _force: bool) -> anyhow::Result<i32> {
    anyhow::bail!(WITHOUT_LIBTORCH)
}

#[cfg(feature = "inference")]
fn inference_check(settings: &crate::inference::InferenceSettings) -> anyhow::Result<i32> {
    crate::inference::check::run(settings)
}

#[cfg(not(feature = "inference"))]
fn inference_check(_settings: &crate::inference::InferenceSettings) -> anyhow::Result<i32> {
    anyhow::bail!(WITHOUT_LIBTORCH)
}

#[cfg(not(feature = "inference"))]
const WITHOUT_LIBTORCH: &str = "this yardmaster was built without the `inference` feature (libtorch): `source scripts/libtorch.sh`, then build with default features";

/// Parses the command line and runs it with `registry`'s operations; the process exit code.
pub fn main_with(registry: OperationRegistry) -> ExitCode {
    let cli = Cli::parse();
    let system = actix_rt::System::new();
    let ran = match cli.command {
        // A client reads no server settings and logs nothing: what it prints is its output.
        Command::Client(command) => {
            return match system.block_on(crate::client::commands::run(command, Cli::command())) {
                Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                Err(err) => {
                    eprintln!("yardmaster: {err:#}");
                    ExitCode::FAILURE
                }
            };
        }
        command => system.block_on(run(cli.config.as_deref(), command, registry)),
    };
    let code = ran.unwrap_or_else(|err| {
        eprintln!("yardmaster: {err:#}");
        1
    });
    // Everything that must finish has (drains, requeues); exit before the runtime is torn
    // down, so a task still winding down (or a pool a failed start leaves behind) is not
    // dropped in the middle of a database write, or outside the runtime it needs.
    //
    // `exit` runs this thread's thread-local destructors, which drop its handle on the
    // actix `System`, while the HTTP workers' threads may still be ending and dropping
    // theirs. The last handle dropped wakes the system's controller task, and when that
    // happens on a worker thread whose task-local state is already gone, tokio panics in a
    // thread-local destructor and the process aborts (exit 134 instead of 143). A handle
    // kept to the end means no thread's drop is ever the last.
    std::mem::forget(actix_rt::System::current());
    telemetry::otel::shutdown();
    std::process::exit(code)
}

async fn run(config: Option<&std::path::Path>, command: Command, registry: OperationRegistry) -> anyhow::Result<i32> {
    let mut settings = Settings::load(config)?;
    telemetry::init_with(&settings.log);
    let builder = match command {
        Command::Serve(args) => {
            if let Some(bind) = args.bind {
                settings.server.bind = bind;
            }
            if args.no_workers {
                settings.worker.enabled = false;
            }
            Application::builder(settings)
        }
        Command::Worker(args) => {
            if !args.queues.is_empty() {
                settings.consume_only(&args.queues)?;
            }
            settings.worker.enabled = true;
            Application::builder(settings).without_api()
        }
        Command::Reaper => {
            settings.worker.enabled = false;
            settings.reaper.enabled = true;
            Application::builder(settings).without_api()
        }
        Command::Model(ModelCommand::Init(args)) => {
            let path = args.out.unwrap_or_else(|| PathBuf::from(&settings.inference.model));
            return model_init(&path, settings.inference.vocab, args.force);
        }
        Command::Inference(InferenceCommand::Check) => return inference_check(&settings.inference),
        Command::Token(TokenCommand::New) => return crate::auth::commands::print_new(),
        Command::Token(command) => {
            let db = store::connect(&settings.store).await?;
            store::migrate(&db).await?;
            return crate::auth::commands::run(&db, command).await;
        }
        Command::ScriptHost(args) => {
            let token = std::env::var("YARDMASTER_TOKEN").map_err(|_| {
                anyhow::anyhow!("set YARDMASTER_TOKEN to a worker token (yardmaster token create --role worker)")
            })?;
            let options = crate::uploads::remote_host::HostOptions {
                url: args.url.trim_end_matches('/').to_owned(),
                token,
                services: args.services,
                slots: args.slots,
                dir: args.dir,
                name: args.name,
                grace: std::time::Duration::from_secs(args.grace_seconds),
            };
            return crate::uploads::remote_host::run(options).await;
        }
        Command::Client(command) => return crate::client::commands::run(command, Cli::command()).await,
        Command::Migrate => {
            let db = store::connect(&settings.store).await?;
            store::migrate(&db).await?;
            println!("migrations applied");
            return Ok(0);
        }
    };
    let app = builder.registry(registry).handle_signals().build().await?;
    Ok(app.run_until_stopped().await?)
}
