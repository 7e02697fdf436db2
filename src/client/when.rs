//! The command line's times: `--at` an RFC 3339 instant, `--in` a span such as `10m`.

use std::time::Duration;

use chrono::{DateTime, FixedOffset};

/// An RFC 3339 instant, with its offset.
pub fn instant(text: &str) -> Result<DateTime<FixedOffset>, String> {
    DateTime::parse_from_rfc3339(text)
        .map_err(|err| format!("{err}: give a time as RFC 3339, such as 2026-12-01T02:00:00Z or ...T02:00:00+01:00"))
}

/// A span: whole numbers each with a unit (`d`, `h`, `m`, `s`), such as `1h30m`, or a plain
/// number of seconds (`90`, `2.5`).
pub fn span(text: &str) -> Result<Duration, String> {
    let wrong = || format!("{text:?} is not a span: give one such as 90s, 10m, 2h, 1d, 1h30m or 45");
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| wrong());
    }
    let (mut total, mut digits) = (0u64, String::new());
    for c in text.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'd' | 'h' | 'm' | 's' if !digits.is_empty() => {
                let unit = match c {
                    'd' => 86_400,
                    'h' => 3_600,
                    'm' => 60,
                    _ => 1,
                };
                let count: u64 = digits.parse().map_err(|_| wrong())?;
                total = count.checked_mul(unit).and_then(|part| total.checked_add(part)).ok_or_else(wrong)?;
                digits.clear();
            }
            _ => return Err(wrong()),
        }
    }
    match digits.is_empty() && !text.is_empty() {
        true => Ok(Duration::from_secs(total)),
        false => Err(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_write_them() {
        assert_eq!(span("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(span("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(span("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(span("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(span("2.5"), Ok(Duration::from_millis(2500)));
        for wrong in ["", "m", "10x", "5m3", "-1", "1h-5m", "99999999999999999999d"] {
            assert!(span(wrong).is_err(), "{wrong:?} was read");
        }
    }

    #[test]
    fn instants_need_an_offset() {
        assert!(instant("2026-12-01T02:00:00+01:00").is_ok());
        assert!(instant("2026-12-01 02:00").is_err());
    }
}
