//! When a schedule fires: a cron expression (5 or 6 fields, `@hourly` style aliases) read
//! in an IANA time zone, or a period aligned to the epoch; and which of the ticks due at a
//! moment fire and which are missed, by the catch-up policy. Pure: every time comes in as
//! an argument (the scheduler passes the store's clock), so tests inject any moment.

use std::str::FromStr as _;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};

/// The shortest period: a schedule fires at most once a second.
pub const MIN_PERIOD_SECONDS: f64 = 1.0;
/// The longest period: a year.
pub const MAX_PERIOD_SECONDS: f64 = 366.0 * 86_400.0;
/// Most ticks counted one by one when a cron schedule missed many (beyond, the count says
/// "at least").
const COUNT_LIMIT: u64 = 100_000;

/// What a schedule does after ticks passed while no scheduler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Fire no tick later than `scheduler.misfire_grace_ms`: the schedule resumes at its next tick.
    None,
    /// Fire the latest due tick once; the earlier ones are missed.
    #[default]
    Last,
    /// Fire every due tick, oldest first, up to `max_catch_up` (the latest ones).
    All,
}

/// What a tick does while the job of the last one is unfinished (QUEUED or RUNNING).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Submit anyway: the runs may overlap.
    Allow,
    /// Submit nothing: the tick is skipped.
    #[default]
    Skip,
    /// Cancel the unfinished job, then submit.
    CancelPrevious,
}

impl CatchUp {
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Last => "last",
            CatchUp::All => "all",
        }
    }

    pub fn parse(text: &str) -> Option<CatchUp> {
        [CatchUp::None, CatchUp::Last, CatchUp::All].into_iter().find(|policy| policy.as_str() == text)
    }
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }

    pub fn parse(text: &str) -> Option<Overlap> {
        [Overlap::Allow, Overlap::Skip, Overlap::CancelPrevious].into_iter().find(|policy| policy.as_str() == text)
    }
}

/// Why a schedule's times cannot be used; the field is the body's (`/cron`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct SpecError {
    pub pointer: &'static str,
    pub detail: String,
}

fn refuse(pointer: &'static str, detail: impl Into<String>) -> SpecError {
    SpecError { pointer, detail: detail.into() }
}

/// When a schedule fires.
#[derive(Debug, Clone)]
pub struct Spec {
    every: Every,
    zone: Tz,
}

#[derive(Debug, Clone)]
enum Every {
    Cron(Box<Cron>),
    /// Milliseconds; ticks at whole multiples of it since the epoch.
    Period(i64),
}

const FIVE: [&str; 5] = ["minute", "hour", "day of month", "month", "day of week"];
const SIX: [&str; 6] = ["second", "minute", "hour", "day of month", "month", "day of week"];

impl Spec {
    /// Exactly one of `cron` and `every_seconds`, in `timezone` (default UTC).
    pub fn parse(cron: Option<&str>, every_seconds: Option<f64>, timezone: Option<&str>) -> Result<Spec, SpecError> {
        let zone = zone(timezone)?;
        let every = match (cron, every_seconds) {
            (Some(_), Some(_)) => return Err(refuse("/every_seconds", "give cron or every_seconds, not both")),
            (None, None) => return Err(refuse("/cron", "give cron (for example \"0 2 * * *\") or every_seconds")),
            (Some(expression), None) => Every::Cron(Box::new(parse_cron(expression)?)),
            (None, Some(seconds)) => Every::Period(period(seconds)?),
        };
        let spec = Spec { every, zone };
        if spec.next_after(DateTime::UNIX_EPOCH + TimeDelta::days(365 * 56)).is_none() {
            return Err(refuse("/cron", "this cron expression never fires"));
        }
        Ok(spec)
    }

    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first tick strictly after `time`; `None` if none comes.
    pub fn next_after(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.every {
            Every::Period(ms) => {
                let now = time.timestamp_millis();
                let next = (now.div_euclid(*ms) + 1).checked_mul(*ms)?;
                DateTime::from_timestamp_millis(next)
            }
            Every::Cron(cron) => {
                let local = time.with_timezone(&self.zone);
                cron.find_next_occurrence(&local, false).ok().map(|next| next.with_timezone(&Utc))
            }
        }
    }

    /// The latest tick at or before `time`.
    fn latest_at(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.every {
            Every::Period(ms) => DateTime::from_timestamp_millis(time.timestamp_millis().div_euclid(*ms) * ms),
            Every::Cron(cron) => {
                let local = time.with_timezone(&self.zone);
                cron.find_previous_occurrence(&local, true).ok().map(|previous| previous.with_timezone(&Utc))
            }
        }
    }

    /// The `n`th latest tick at or before `time` (1: the latest).
    fn nth_latest_at(&self, time: DateTime<Utc>, n: u32) -> Option<DateTime<Utc>> {
        let mut tick = self.latest_at(time)?;
        for _ in 1..n {
            tick = self.latest_at(tick - TimeDelta::milliseconds(1))?;
        }
        Some(tick)
    }

    /// Ticks in `[from, until)`, `from` a tick: exact for a period, counted one by one
    /// (at most [`COUNT_LIMIT`]) for cron.
    fn ticks_between(&self, from: DateTime<Utc>, until: DateTime<Utc>) -> u64 {
        match &self.every {
            Every::Period(ms) => ((until - from).num_milliseconds().max(0) as u64).div_ceil(*ms as u64),
            Every::Cron(_) => {
                let (mut tick, mut count) = (from, 0);
                while tick < until && count < COUNT_LIMIT {
                    count += 1;
                    match self.next_after(tick) {
                        Some(next) => tick = next,
                        None => break,
                    }
                }
                count
            }
        }
    }

    /// What the tick due at `due` does at `now` under `catch_up`: fire, or be missed with
    /// the ticks after it up to the one the schedule resumes at. Ticks not yet due are
    /// never touched.
    pub fn step(&self, due: DateTime<Utc>, now: DateTime<Utc>, policy: &Policy) -> Step {
        let resume = match policy.catch_up {
            // Only a tick within the grace still fires.
            CatchUp::None if now - due <= policy.misfire_grace => return Step::Fire(due),
            CatchUp::None => match self.next_after(now - policy.misfire_grace - TimeDelta::milliseconds(1)) {
                Some(first_on_time) => first_on_time,
                None => return Step::Retire,
            },
            CatchUp::Last => self.latest_at(now).unwrap_or(due),
            CatchUp::All => self.nth_latest_at(now, policy.max_catch_up.max(1)).unwrap_or(due),
        };
        match resume > due {
            true => Step::Miss { count: self.ticks_between(due, resume), resume },
            false => Step::Fire(due),
        }
    }
}

/// A schedule's catch-up rules, as a step reads them.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub catch_up: CatchUp,
    pub max_catch_up: u32,
    /// How late a tick may be and still fire under [`CatchUp::None`].
    pub misfire_grace: TimeDelta,
}

/// What one due tick does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Submit its job (overlap permitting).
    Fire(DateTime<Utc>),
    /// It and the ticks before `resume` are missed (`count` of them); `resume` is due next.
    Miss { count: u64, resume: DateTime<Utc> },
    /// No tick ever comes again.
    Retire,
}

fn zone(timezone: Option<&str>) -> Result<Tz, SpecError> {
    let name = timezone.unwrap_or("UTC");
    Tz::from_str(name).map_err(|_| {
        refuse("/timezone", format!("{name:?} is not an IANA time zone (such as \"UTC\" or \"Europe/Madrid\")"))
    })
}

fn period(seconds: f64) -> Result<i64, SpecError> {
    if !seconds.is_finite() || !(MIN_PERIOD_SECONDS..=MAX_PERIOD_SECONDS).contains(&seconds) {
        let detail = format!(
            "every_seconds must be between {MIN_PERIOD_SECONDS} (a schedule fires at most once a second) and \
             {MAX_PERIOD_SECONDS}, not {seconds}"
        );
        return Err(refuse("/every_seconds", detail));
    }
    Ok((seconds * 1000.0).round() as i64)
}

fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build()
}

/// A cron expression of 5 fields (minute first) or 6 (second first), or an alias; a wrong
/// one is refused naming its field.
fn parse_cron(expression: &str) -> Result<Cron, SpecError> {
    let expression = expression.trim();
    let expression = match expression.to_ascii_lowercase().as_str() {
        "@midnight" => "@daily",
        _ => expression,
    };
    if expression.contains('\0') || expression.chars().count() > 256 {
        return Err(refuse("/cron", "a cron expression is at most 256 characters, without NUL"));
    }
    if expression.starts_with('@') {
        return parser().parse(expression).map_err(|_| {
            refuse(
                "/cron",
                format!(
                    "unknown alias {expression:?}: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
                ),
            )
        });
    }
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let names: &[&str] = match fields.len() {
        5 => &FIVE,
        6 => &SIX,
        count => {
            let detail = format!(
                "a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), \
                 not {count}"
            );
            return Err(refuse("/cron", detail));
        }
    };
    parser().parse(expression).map_err(|err| {
        // The first field that fails on its own, the others left as `*`.
        let wrong = (0..fields.len()).find(|&at| {
            let probe: Vec<&str> = (0..fields.len()).map(|i| if i == at { fields[at] } else { "*" }).collect();
            parser().parse(&probe.join(" ")).is_err()
        });
        let detail = match wrong {
            Some(at) => format!("the {} field {:?} of the cron expression is not valid", names[at], fields[at]),
            None => format!("the cron expression is not valid: {err}"),
        };
        refuse("/cron", detail)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    fn ticks(spec: &Spec, from: &str, count: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut time = at(from);
        for _ in 0..count {
            time = spec.next_after(time).unwrap();
            out.push(time.to_rfc3339());
        }
        out
    }

    #[test]
    fn a_daily_0230_runs_once_on_spring_forward_and_once_on_fall_back() {
        let spec = Spec::parse(Some("30 2 * * *"), None, Some("Europe/Madrid")).unwrap();
        // 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist, the job runs at
        // the first instant after the gap, once.
        assert_eq!(
            ticks(&spec, "2026-03-27T12:00:00Z", 3),
            ["2026-03-28T01:30:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00"]
        );
        // 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice, the job runs once.
        assert_eq!(
            ticks(&spec, "2026-10-23T12:00:00Z", 3),
            ["2026-10-24T00:30:00+00:00", "2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"]
        );
    }

    #[test]
    fn an_hourly_schedule_keeps_real_hours_across_the_changes() {
        let spec = Spec::parse(Some("@hourly"), None, Some("America/New_York")).unwrap();
        // 2026-11-01 01:00 EDT → 01:00 EST: every real hour fires, the repeated one too.
        let got = ticks(&spec, "2026-11-01T04:30:00Z", 3);
        assert_eq!(got, ["2026-11-01T05:00:00+00:00", "2026-11-01T06:00:00+00:00", "2026-11-01T07:00:00+00:00"]);
    }

    #[test]
    fn six_fields_take_seconds_and_periods_align_to_the_epoch() {
        let spec = Spec::parse(Some("*/15 * * * * *"), None, None).unwrap();
        assert_eq!(ticks(&spec, "2026-01-01T00:00:01Z", 2), ["2026-01-01T00:00:15+00:00", "2026-01-01T00:00:30+00:00"]);
        let spec = Spec::parse(None, Some(60.0), None).unwrap();
        assert_eq!(
            ticks(&spec, "2026-01-01T00:00:59.999Z", 2),
            ["2026-01-01T00:01:00+00:00", "2026-01-01T00:02:00+00:00"]
        );
    }

    #[test]
    fn bad_specs_name_what_is_wrong() {
        let wrong = |cron: &str| Spec::parse(Some(cron), None, None).unwrap_err();
        assert_eq!(wrong("61 * * * *").detail, "the minute field \"61\" of the cron expression is not valid");
        assert_eq!(
            wrong("0 2 * * FUNDAY").detail,
            "the day of week field \"FUNDAY\" of the cron expression is not valid"
        );
        assert_eq!(wrong("* * *").pointer, "/cron");
        assert!(wrong("* * *").detail.contains("not 3"), "{}", wrong("* * *").detail);
        assert!(wrong("@fortnightly").detail.starts_with("unknown alias"));
        assert_eq!(wrong("0 0 30 2 *").detail, "this cron expression never fires");
        let zone = Spec::parse(Some("@daily"), None, Some("Mars/Olympus")).unwrap_err();
        assert_eq!(zone.pointer, "/timezone");
        let fast = Spec::parse(None, Some(0.5), None).unwrap_err();
        assert_eq!(fast.pointer, "/every_seconds");
        assert!(Spec::parse(None, Some(f64::NAN), None).is_err());
        assert!(Spec::parse(Some("@daily"), Some(5.0), None).is_err());
        assert!(Spec::parse(None, None, None).is_err());
        assert!(Spec::parse(Some("@midnight"), None, None).is_ok());
    }

    fn policy(catch_up: CatchUp, max_catch_up: u32) -> Policy {
        Policy { catch_up, max_catch_up, misfire_grace: TimeDelta::seconds(60) }
    }

    #[test]
    fn catch_up_after_downtime_follows_the_policy() {
        let hourly = Spec::parse(Some("0 * * * *"), None, None).unwrap();
        let due = at("2026-01-01T00:00:00Z");
        let now = at("2026-01-01T05:30:00Z");
        // Six ticks are due (00:00 … 05:00).
        assert_eq!(
            hourly.step(due, now, &policy(CatchUp::Last, 10)),
            Step::Miss { count: 5, resume: at("2026-01-01T05:00:00Z") }
        );
        assert_eq!(
            hourly.step(at("2026-01-01T05:00:00Z"), now, &policy(CatchUp::Last, 10)),
            Step::Fire(at("2026-01-01T05:00:00Z"))
        );
        assert_eq!(hourly.step(due, now, &policy(CatchUp::All, 10)), Step::Fire(due));
        assert_eq!(
            hourly.step(due, now, &policy(CatchUp::All, 2)),
            Step::Miss { count: 4, resume: at("2026-01-01T04:00:00Z") }
        );
        assert_eq!(
            hourly.step(due, now, &policy(CatchUp::None, 10)),
            Step::Miss { count: 6, resume: at("2026-01-01T06:00:00Z") }
        );
        // A tick a moment late fires under every policy.
        let late = at("2026-01-01T00:00:02Z");
        for catch_up in [CatchUp::None, CatchUp::Last, CatchUp::All] {
            assert_eq!(hourly.step(due, late, &policy(catch_up, 1)), Step::Fire(due));
        }
        let every = Spec::parse(None, Some(1.0), None).unwrap();
        let day_later = due + TimeDelta::days(1);
        assert_eq!(
            every.step(due, day_later, &policy(CatchUp::Last, 1)),
            Step::Miss { count: 86_400, resume: day_later }
        );
    }
}
