//! `docqa keys`: API keys from the command line, on the server's database (it may be running). `create`
//! mints a tenant key and prints it once (by default for the local user, whom the OpenAI SDK must
//! name with a key even in local mode); `list` shows the keys of a tenant without their secrets.

use clap::{Args, Subcommand};

use super::database::DatabaseArgs;
use crate::db::Db;
use crate::db::tenants::{self, LOCAL_TENANT};

/// `docqa keys`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    action: KeysAction,
}

#[derive(Debug, Subcommand)]
enum KeysAction {
    /// Create a key for a tenant and print it (shown only this once).
    Create {
        #[command(flatten)]
        database: DatabaseArgs,
        /// The tenant's id [default: the local user].
        #[arg(long, default_value = LOCAL_TENANT)]
        tenant: String,
        /// A label for the key.
        #[arg(long, default_value = "created with docqa keys")]
        name: String,
    },
    /// List a tenant's keys (prefix, label, creation and revocation), never their secrets.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
        /// The tenant's id [default: the local user].
        #[arg(long, default_value = LOCAL_TENANT)]
        tenant: String,
    },
}

/// Runs `docqa keys`.
pub fn run(args: KeysArgs) -> anyhow::Result<()> {
    actix_web::rt::System::new().block_on(async {
        match args.action {
            KeysAction::Create {
                database,
                tenant,
                name,
            } => {
                let db = database.open().await?;
                let key = create(&db, &tenant, &name).await;
                db.close().await;
                println!("{}", key?);
            }
            KeysAction::List { database, tenant } => {
                let db = database.open().await?;
                let keys = db.list_keys(Some(&tenant)).await;
                db.close().await;
                for k in keys? {
                    let state = match k.revoked_at {
                        Some(_) => "revoked",
                        None => "active",
                    };
                    println!("{}\t{}…\t{state}\t{}", k.id, k.prefix, k.name);
                }
            }
        }
        Ok(())
    })
}

/// A new key of `tenant`; the local user's tenant is created when missing.
async fn create(db: &Db, tenant: &str, name: &str) -> anyhow::Result<String> {
    if tenant == LOCAL_TENANT {
        db.ensure_local_tenant().await?;
    } else if !db.tenant_exists(tenant).await? {
        anyhow::bail!(
            "no tenant with id {tenant} (list them with GET /v1/tenants and the admin key)"
        );
    }
    let key = tenants::generate_key();
    db.insert_key(&key, Some(tenant), name, false).await?;
    Ok(key)
}
