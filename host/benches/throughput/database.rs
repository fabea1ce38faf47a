//! Where the throughput benchmark's measurements run: a fresh SQLite file each (the default), or
//! a fresh database each on a PostgreSQL or MySQL/MariaDB server named by `--database URL`,
//! created before the measurement and dropped after it, so that repeated runs start alike.
//! Also the few statements the benchmark runs itself, beside the hosts: server settings, the
//! drain's progress, which host ran a task, an application's own INSERT.

use sqlx::{Connection, MySqlPool, PgPool, SqlitePool};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The database server every measurement of a run uses.
#[derive(Clone)]
pub enum Server {
    /// A new SQLite file per measurement.
    Sqlite,
    /// A server, and the URL of a database on it to connect to when creating and dropping the
    /// measurements' databases (the login needs the right to create databases).
    Postgres(String),
    MySql(String),
}

impl Server {
    /// The server `--database` names: SQLite without one.
    pub fn from_url(url: Option<&str>) -> Server {
        let Some(url) = url.filter(|u| !u.starts_with("sqlite")) else {
            return Server::Sqlite;
        };
        match spool::store::Backend::of(url) {
            Ok(spool::store::Backend::Postgres) => Server::Postgres(url.to_string()),
            Ok(spool::store::Backend::MySql) => Server::MySql(url.to_string()),
            _ => panic!("--database takes a postgres:// or mysql:// URL, not {url}"),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Server::Sqlite => "SQLite",
            Server::Postgres(_) => "PostgreSQL",
            Server::MySql(_) => "MySQL/MariaDB",
        }
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self, Server::Sqlite)
    }

    /// Whether hosts on this database wake each other on every enqueue (LISTEN/NOTIFY).
    pub fn notifies(&self) -> bool {
        matches!(self, Server::Postgres(_))
    }

    /// The server's version and the settings that decide what a commit costs.
    pub async fn describe(&self) -> String {
        match self {
            Server::Sqlite => {
                let pool = SqlitePool::connect("sqlite::memory:").await.expect("opens");
                let (version,): (String,) = sqlx::query_as("SELECT sqlite_version()")
                    .fetch_one(&pool)
                    .await
                    .expect("version read");
                pool.close().await;
                format!(
                    "SQLite {version} (embedded), WAL, synchronous=NORMAL; a fresh file per measurement"
                )
            }
            Server::Postgres(url) => {
                let pool = PgPool::connect(url).await.expect("the server answers");
                let settings: Vec<(String, String)> = sqlx::query_as(
                    "SELECT name, current_setting(name) FROM pg_settings \
                     WHERE name IN ('fsync', 'synchronous_commit', 'wal_sync_method', \
                                    'full_page_writes', 'shared_buffers', 'max_connections') \
                     ORDER BY name",
                )
                .fetch_all(&pool)
                .await
                .expect("settings read");
                let (version,): (String,) = sqlx::query_as("SELECT version()")
                    .fetch_one(&pool)
                    .await
                    .expect("version read");
                pool.close().await;
                format!(
                    "{version}\nserver settings: {}; a fresh database per measurement",
                    listed(&settings)
                )
            }
            Server::MySql(url) => {
                let pool = MySqlPool::connect(url).await.expect("the server answers");
                let mut settings = Vec::new();
                for name in [
                    "innodb_flush_log_at_trx_commit",
                    "innodb_doublewrite",
                    "innodb_flush_method",
                    "innodb_buffer_pool_size",
                    "log_bin",
                    "sync_binlog",
                    "max_connections",
                ] {
                    let value: (Vec<u8>,) =
                        sqlx::query_as(&format!("SELECT CAST(@@{name} AS CHAR)"))
                            .fetch_one(&pool)
                            .await
                            .expect("setting read");
                    settings.push((name.to_string(), text(value.0)));
                }
                let (version,): (Vec<u8>,) = sqlx::query_as("SELECT VERSION()")
                    .fetch_one(&pool)
                    .await
                    .expect("version read");
                pool.close().await;
                format!(
                    "MySQL/MariaDB {}\nserver settings: {}; a fresh database per measurement",
                    text(version),
                    listed(&settings)
                )
            }
        }
    }

    /// A new, empty database for one measurement, with a folder for its hosts' plugins and
    /// caches.
    pub async fn fresh(&self) -> Fresh {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = tempfile::tempdir().expect("temp dir");
        let name = format!(
            "spool_bench_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let (url, created) = match self {
            Server::Sqlite => (
                format!("sqlite://{}", dir.path().join("bench.db").display()),
                None,
            ),
            Server::Postgres(server) | Server::MySql(server) => {
                self.execute(&format!("DROP DATABASE IF EXISTS {name}"))
                    .await;
                self.execute(&format!("CREATE DATABASE {name}")).await;
                (with_database(server, &name), Some(name))
            }
        };
        Fresh {
            dir,
            url,
            created,
            server: self.clone(),
        }
    }

    /// Runs one statement on the server's own database, on a connection of its own.
    async fn execute(&self, statement: &str) {
        if let Err(error) = self.try_execute(statement).await {
            panic!("`{statement}` failed: {error}");
        }
    }

    async fn try_execute(&self, statement: &str) -> Result<(), String> {
        let result = match self {
            Server::Sqlite => return Ok(()),
            Server::Postgres(url) => {
                let mut connection = sqlx::PgConnection::connect(url)
                    .await
                    .expect("the server answers");
                let result = sqlx::raw_sql(statement).execute(&mut connection).await;
                let _ = connection.close().await;
                result.map(drop)
            }
            Server::MySql(url) => {
                let mut connection = sqlx::MySqlConnection::connect(url)
                    .await
                    .expect("the server answers");
                let result = sqlx::raw_sql(statement).execute(&mut connection).await;
                let _ = connection.close().await;
                result.map(drop)
            }
        };
        result.map_err(|error| error.to_string())
    }
}

/// One measurement's database and folder.
pub struct Fresh {
    pub dir: tempfile::TempDir,
    /// The database's URL, for hosts and stores.
    pub url: String,
    /// The database created on the server, dropped by [`Fresh::remove`].
    created: Option<String>,
    server: Server,
}

impl Fresh {
    /// A small pool of the benchmark's own on this database.
    pub async fn pool(&self) -> Direct {
        match &self.server {
            Server::Sqlite => Direct::Sqlite(SqlitePool::connect(&self.url).await.expect("opens")),
            Server::Postgres(_) => {
                Direct::Postgres(PgPool::connect(&self.url).await.expect("opens"))
            }
            Server::MySql(_) => Direct::MySql(MySqlPool::connect(&self.url).await.expect("opens")),
        }
    }

    /// Updates the planner's statistics of the task table, as autovacuum does for a table in
    /// use (PostgreSQL, MySQL/MariaDB; SQLite's store pins its indexes and keeps none).
    pub async fn analyze(&self) {
        let statement = match &self.server {
            Server::Sqlite => return,
            Server::Postgres(_) => "ANALYZE async_task",
            Server::MySql(_) => "ANALYZE TABLE async_task",
        };
        let sql = self.pool().await;
        let result = match &sql {
            Direct::Sqlite(_) => Ok(()),
            Direct::Postgres(pool) => sqlx::raw_sql(statement).execute(pool).await.map(drop),
            Direct::MySql(pool) => sqlx::raw_sql(statement).execute(pool).await.map(drop),
        };
        sql.close().await;
        result.unwrap_or_else(|e| panic!("`{statement}` failed: {e}"));
    }

    /// Drops the measurement's database (its hosts and stores must be closed). On PostgreSQL a
    /// session of a closed pool can outlive `close()` until the pool is dropped, and only a
    /// superuser may end every session at once (`WITH (FORCE)` also ends autovacuum workers), so
    /// the benchmark ends its own sessions first and the drop waits for autovacuum, which it
    /// stops.
    pub async fn remove(self) {
        let Some(name) = &self.created else {
            return;
        };
        if self.server.notifies() {
            self.server
                .execute(&format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = '{name}' AND usename = current_user \
                       AND pid <> pg_backend_pid()"
                ))
                .await;
        }
        let statement = format!("DROP DATABASE IF EXISTS {name}");
        for _ in 0..60 {
            match self.server.try_execute(&statement).await {
                Ok(()) => return,
                Err(error) if error.contains("is being accessed by other users") => {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                Err(error) => panic!("`{statement}` failed: {error}"),
            }
        }
        panic!("`{statement}` failed: the database stayed in use for 30 s");
    }
}

/// The benchmark's own connections to a measurement's database.
pub enum Direct {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    MySql(MySqlPool),
}

impl Direct {
    /// The first column of the first row of `statement`, an integer of any width or NULL (also
    /// for an `INSERT … RETURNING id`).
    pub async fn int(&self, statement: &str) -> Option<i64> {
        use sqlx::Row;
        let value = match self {
            Direct::Sqlite(pool) => sqlx::query(statement)
                .fetch_one(pool)
                .await
                .and_then(|row| row.try_get::<Option<i64>, _>(0)),
            // PostgreSQL's integer types do not decode into each other's.
            Direct::Postgres(pool) => {
                sqlx::query(statement)
                    .fetch_one(pool)
                    .await
                    .and_then(|row| {
                        row.try_get::<Option<i64>, _>(0)
                            .or_else(|_| row.try_get::<Option<i32>, _>(0).map(|v| v.map(i64::from)))
                            .or_else(|_| row.try_get::<Option<i16>, _>(0).map(|v| v.map(i64::from)))
                    })
            }
            Direct::MySql(pool) => sqlx::query(statement)
                .fetch_one(pool)
                .await
                .and_then(|row| row.try_get::<Option<i64>, _>(0)),
        };
        value.unwrap_or_else(|e| panic!("`{statement}` failed: {e}"))
    }

    /// Tasks that are not finished yet: 0 or 1 (a look at the listing index that stops at the
    /// first pending or running row, cheap enough to ask every few milliseconds).
    pub async fn any_unfinished(&self) -> bool {
        self.int(
            "SELECT COUNT(*) FROM \
             (SELECT 1 FROM async_task WHERE status IN (0, 1) LIMIT 1) AS unfinished",
        )
        .await
            != Some(0)
    }

    pub async fn close(self) {
        match self {
            Direct::Sqlite(pool) => pool.close().await,
            Direct::Postgres(pool) => pool.close().await,
            Direct::MySql(pool) => pool.close().await,
        }
    }
}

fn listed(settings: &[(String, String)]) -> String {
    settings
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `url` with another database.
fn with_database(url: &str, database: &str) -> String {
    let (rest, query) = match url.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (url, None),
    };
    let (server, _) = rest
        .rsplit_once('/')
        .filter(|(server, _)| server.contains("://"))
        .unwrap_or_else(|| panic!("--database needs a URL with a database: {url}"));
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}
