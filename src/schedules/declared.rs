//! The schedules of `config.toml` (`[schedules.NAME]`), created at start, or brought up to
//! date when the file changed them: operations keep schedules in version control. Many
//! processes starting at once agree: the insert is keyed by room and name, the update a
//! compare-and-set on the version.

use std::collections::BTreeMap;

use anyhow::Context as _;

use super::book::NameTaken;
use super::entity::schedule;
use super::service::Schedules;
use super::settings::DeclaredSchedule;
use super::spec::Spec;
use crate::domain::RoomId;
use crate::store::clock;

/// Creates or updates every declared schedule; a schedule the file no longer names is left
/// as it is (delete it over the API). The file's fields win over changes made over the API,
/// but `paused` only when the file sets it.
pub async fn apply(schedules: &Schedules, declared: &BTreeMap<String, DeclaredSchedule>) -> anyhow::Result<()> {
    for (name, wanted) in declared {
        apply_one(schedules, name, wanted).await.with_context(|| format!("schedules.{name}"))?;
    }
    Ok(())
}

async fn apply_one(schedules: &Schedules, name: &str, wanted: &DeclaredSchedule) -> anyhow::Result<()> {
    let room = RoomId::parse(wanted.room.as_deref().unwrap_or(RoomId::GLOBAL)).map_err(anyhow::Error::msg)?;
    let spec = Spec::parse(wanted.cron.as_deref(), wanted.every_seconds, wanted.timezone.as_deref())
        .map_err(|err| anyhow::anyhow!("{}", err.detail))?;
    schedules.check_job(&wanted.job, &room).map_err(|err| {
        anyhow::anyhow!("job{}: {}", err.pointer.as_deref().unwrap_or("").trim_start_matches("/job"), err.detail)
    })?;
    let max_catch_up = wanted.max_catch_up.unwrap_or(super::bodies::DEFAULT_MAX_CATCH_UP);
    anyhow::ensure!((1..=super::bodies::MAX_CATCH_UP).contains(&max_catch_up), "max_catch_up must be 1-1000");
    for _ in 0..3 {
        let now = clock::now();
        let Some(s) = schedules.book.find(room.as_str(), name).await? else {
            let made = schedule::Made {
                room: room.as_str().to_owned(),
                name: name.to_owned(),
                cron: wanted.cron.clone(),
                every_seconds: wanted.every_seconds,
                timezone: spec.zone().name().to_owned(),
                job: wanted.job.clone(),
                overlap: wanted.overlap.unwrap_or_default(),
                catch_up: wanted.catch_up.unwrap_or_default(),
                max_catch_up,
                paused: wanted.paused.unwrap_or(false),
                first: spec.next_after(now).context("it never fires")?,
                source: "config",
            };
            let row = schedule::Model::made(made, now);
            match schedules.book.insert(row).await? {
                Ok(_) => return Ok(()),
                Err(NameTaken) => continue,
            }
        };
        let mut changed = s.clone();
        changed.cron = wanted.cron.clone();
        changed.every_seconds = wanted.every_seconds;
        changed.timezone = spec.zone().name().to_owned();
        changed.job = wanted.job.clone();
        changed.overlap = wanted.overlap.unwrap_or_default().as_str().to_owned();
        changed.catch_up = wanted.catch_up.unwrap_or_default().as_str().to_owned();
        changed.max_catch_up = max_catch_up as i32;
        // A pause made over the API (an incident, say) outlives a restart unless the file says.
        if let Some(paused) = wanted.paused {
            changed.paused = paused;
        }
        changed.source = "config".to_owned();
        let times =
            (&changed.cron, changed.every_seconds, &changed.timezone) != (&s.cron, s.every_seconds, &s.timezone);
        if times || (s.paused && !changed.paused) {
            changed.next_fire_at = spec.next_after(now).context("it never fires")?;
        }
        if changed == s {
            return Ok(());
        }
        if schedules.book.update(changed).await?.is_some() {
            return Ok(());
        }
    }
    anyhow::bail!("it kept changing while it was brought up to date")
}
