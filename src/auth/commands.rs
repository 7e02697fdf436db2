//! `yardmaster token …`: make, list and revoke tokens straight on the store (no server
//! needed), and print a fresh token for `auth.bootstrap_token`.

use clap::{Args, Subcommand};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::caller::Role;
use super::secret;
use super::tokens::{self, NewToken, TokenInfo};
use crate::domain::RoomId;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it, once (only its digest is stored).
    Create(CreateArgs),
    /// List the tokens (never their secrets), newest first.
    List(ListArgs),
    /// Revoke a token: refused at once by this store's servers (within auth.cache_seconds).
    Revoke {
        /// The token's id (as `token list` shows it).
        id: Uuid,
    },
    /// Print a new token without storing it, for auth.bootstrap_token.
    New,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Whose token it is.
    #[arg(long)]
    user: String,
    /// admin (everything), member (its rooms) or worker (remote workers).
    #[arg(long, default_value = "member", value_parser = Role::parse)]
    role: Role,
    /// A room granted; repeat for several. The first is where its jobs go by default.
    /// A member needs at least one.
    #[arg(long = "room", value_name = "ROOM", value_parser = RoomId::parse)]
    rooms: Vec<RoomId>,
    /// May read, never write.
    #[arg(long)]
    read_only: bool,
    /// A note of what the token is for.
    #[arg(long)]
    label: Option<String>,
    /// Print the token and its details as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs a token command; the process exit code.
pub async fn run(db: &DatabaseConnection, command: TokenCommand) -> anyhow::Result<i32> {
    match command {
        TokenCommand::Create(args) => {
            let json = args.json;
            let new = NewToken {
                user: args.user,
                label: args.label,
                role: args.role,
                read_only: args.read_only,
                rooms: args.rooms,
            };
            let created = tokens::create(db, new).await?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&created)?),
                false => {
                    eprintln!(
                        "token {} for {} ({}); shown this once:",
                        created.info.id,
                        created.info.user,
                        describe(&created.info)
                    );
                    println!("{}", created.token);
                }
            }
        }
        TokenCommand::List(args) => {
            let tokens = tokens::list(db).await?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&tokens)?),
                false => print_table(&tokens),
            }
        }
        TokenCommand::Revoke { id } => match tokens::revoke(db, id).await? {
            Some(info) => println!("revoked token {} of {}", info.id, info.user),
            None => {
                eprintln!("yardmaster: no token with id {id}");
                return Ok(1);
            }
        },
        TokenCommand::New => return print_new(),
    }
    Ok(0)
}

/// `token new`: needs no store.
pub fn print_new() -> anyhow::Result<i32> {
    let issued = secret::issue().map_err(|err| anyhow::anyhow!("the system's random generator failed: {err}"))?;
    println!("{}", issued.text);
    Ok(0)
}

fn describe(info: &TokenInfo) -> String {
    let rooms: Vec<&str> = info.rooms.iter().map(RoomId::as_str).collect();
    let access = if info.read_only { ", read-only" } else { "" };
    match rooms.is_empty() {
        true => format!("{}{access}", info.role.as_str()),
        false => format!("{}{access}, rooms {}", info.role.as_str(), rooms.join(", ")),
    }
}

fn print_table(tokens: &[TokenInfo]) {
    println!("{:<36}  {:<20}  {:<8}  {:<10}  ACCESS", "ID", "USER", "STATE", "CREATED");
    for info in tokens {
        let state = if info.revoked_at.is_some() { "revoked" } else { "active" };
        let created = info.created_at.format("%Y-%m-%d");
        println!("{:<36}  {:<20}  {state:<8}  {created:<10}  {}", info.id, info.user, describe(info));
    }
}
