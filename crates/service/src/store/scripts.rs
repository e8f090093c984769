//! A service's migration scripts, compiled into its binary ([`migration_scripts!`]), and the
//! sqlx [`Migrator`] made of them.
//!
//! This replaces `sqlx::migrate!`, which reads the same directory at compile time but needs
//! sqlx's `macros` feature: that feature builds a second copy of sqlx's drivers, tokio and
//! their dependencies for the compiler's host, about 180 s of CPU in every clean build and
//! again in every clean `cargo clippy` (measured with `cargo test --no-run --timings` on
//! 2026-11-29). The scripts, their versions, descriptions and checksums are what the macro made,
//! so databases migrated before keep matching; [`Script::matches_directory`] lets each service
//! test that its list names every file of the directory.
//!
//! [`migration_scripts!`]: crate::migration_scripts

use std::borrow::Cow;
use std::path::Path;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

/// One migration script: its file name (`{version}_{description}.sql`) and its SQL.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// The file name, e.g. `0001_users.sql`.
    pub file: &'static str,
    /// The file's text, as written.
    pub sql: &'static str,
}

/// Lists a crate's migration scripts of one directory, each compiled in with `include_str!`:
/// `migration_scripts!("migrations/sqlite", "0001_parks.sql", "0002_events.sql")`. The
/// directory is relative to the crate's manifest.
#[macro_export]
macro_rules! migration_scripts {
    ($dir:literal, $($file:literal),+ $(,)?) => {
        &[$($crate::store::Script {
            file: $file,
            sql: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $dir, "/", $file)),
        }),+]
    };
}

/// Why a script list cannot become migrations.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file name is not `{version}_{description}.sql` with a positive version.
    #[error("migration file {0:?} is not named VERSION_DESCRIPTION.sql")]
    BadName(&'static str),
}

impl Script {
    /// The sqlx migration: version and description from the file name (underscores read as
    /// spaces, as sqlx reads a directory), and the SQL with its checksum.
    ///
    /// # Errors
    /// [`ScriptError::BadName`] for a file name sqlx would not take either.
    pub fn migration(&self) -> Result<Migration, ScriptError> {
        let bad = || ScriptError::BadName(self.file);
        let stem = self.file.strip_suffix(".sql").ok_or_else(bad)?;
        let (version, description) = stem.split_once('_').ok_or_else(bad)?;
        let version: i64 = version.parse().map_err(|_| bad())?;
        if version <= 0 || description.is_empty() {
            return Err(bad());
        }
        Ok(Migration::new(
            version,
            Cow::Owned(description.replace('_', " ")),
            MigrationType::Simple,
            Cow::Borrowed(self.sql),
            false,
        ))
    }

    /// The migrator for `scripts`, in version order.
    ///
    /// # Errors
    /// [`ScriptError::BadName`] for a badly named script.
    pub async fn migrator(scripts: &'static [Script]) -> Result<Migrator, BoxDynError> {
        Ok(Migrator::new(Scripts(scripts)).await?)
    }

    /// Checks `scripts` against the directory they were compiled from: the same versions,
    /// descriptions and checksums as sqlx reads from the files now, none missing or extra.
    /// For each service's tests.
    ///
    /// # Errors
    /// What differs, in words.
    pub async fn matches_directory(scripts: &'static [Script], dir: &Path) -> Result<(), String> {
        let on_disk = Migrator::new(dir)
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let embedded = Self::migrator(scripts).await.map_err(|e| e.to_string())?;
        let summary = |m: &Migrator| -> Vec<(i64, String, Vec<u8>)> {
            m.iter()
                .map(|m| (m.version, m.description.to_string(), m.checksum.to_vec()))
                .collect()
        };
        if summary(&on_disk) == summary(&embedded) {
            Ok(())
        } else {
            let names = |m: &Migrator| -> Vec<String> {
                m.iter()
                    .map(|m| format!("{}_{}", m.version, m.description))
                    .collect()
            };
            Err(format!(
                "{} holds {:?}, the list compiled in {:?} (or a file changed since)",
                dir.display(),
                names(&on_disk),
                names(&embedded)
            ))
        }
    }
}

/// The scripts as a sqlx migration source.
#[derive(Debug)]
struct Scripts(&'static [Script]);

impl<'s> MigrationSource<'s> for Scripts {
    fn resolve(self) -> futures_util::future::BoxFuture<'s, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            self.0
                .iter()
                .map(|s| s.migration().map_err(BoxDynError::from))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_descriptions_are_read_from_the_file_name_as_sqlx_reads_them() {
        let m = Script {
            file: "0003_coins_and_snapshot.sql",
            sql: "SELECT 1;",
        }
        .migration()
        .expect("well named");
        assert_eq!(m.version, 3);
        assert_eq!(m.description, "coins and snapshot");
        assert_eq!(m.sql, "SELECT 1;");
    }

    #[test]
    fn a_badly_named_script_is_refused() {
        for file in [
            "users.sql",
            "0001_users.txt",
            "x_users.sql",
            "0000_zero.sql",
            "0001_.sql",
        ] {
            let err = Script { file, sql: "" }.migration().expect_err(file);
            assert!(err.to_string().contains(file), "{err}");
        }
    }

    static TEST_SQLITE: &[Script] =
        crate::migration_scripts!("src/store/test-migrations/sqlite", "0001_replicas.sql");

    #[tokio::test]
    async fn a_list_matches_its_directory_and_a_short_one_does_not() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/test-migrations/sqlite");
        Script::matches_directory(TEST_SQLITE, &dir)
            .await
            .expect("the test list names its one file");
        let err = Script::matches_directory(&[], &dir)
            .await
            .expect_err("an empty list misses the file");
        assert!(err.contains("1_replicas"), "{err}");
    }
}
