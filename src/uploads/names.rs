//! Names of uploaded files: what a client may call a file, normalised to one spelling, and
//! why a name is refused. Nothing here touches the disk; a name that passes is a relative
//! path of plain components that cannot leave the directory it is joined to.

use std::collections::BTreeSet;

/// Longest component and whole name, in bytes; deepest nesting.
const MAX_COMPONENT: usize = 255;
const MAX_NAME: usize = 1024;
const MAX_DEPTH: usize = 16;

/// Names Windows reserves for devices, refused with any extension so a result unpacked
/// there cannot open one.
const DEVICES: [&str; 22] = [
    "con", "prn", "aux", "nul", "com1", "com2", "com3", "com4", "com5", "com6", "com7", "com8", "com9", "lpt1", "lpt2",
    "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

/// Why a file name was refused; each maps to its own problem code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("file name {0:?} climbs out of the upload with '..'")]
    Traversal(String),
    #[error("file name {0:?} is absolute; name files relative to the upload")]
    Absolute(String),
    #[error("file name {name:?} is refused: {reason}")]
    Invalid { name: String, reason: &'static str },
    #[error("file name {0:?} is used twice (after normalising), or as both a file and a directory")]
    Duplicate(String),
}

/// The normalised form of a client's file name: `/`-separated components, no empty or `.`
/// components, nothing absolute, no `..`, no control characters or backslashes, no device
/// names, within the length limits.
pub fn normalise(raw: &str) -> Result<String, NameError> {
    let invalid = |reason| NameError::Invalid { name: raw.to_owned(), reason };
    if raw.chars().any(|c| c.is_control()) {
        return Err(invalid("it holds a control character (NUL, newline, ...)"));
    }
    if raw.contains('\\') {
        return Err(invalid("it holds a backslash; separate directories with '/'"));
    }
    if raw.starts_with('/') || raw.starts_with('~') {
        return Err(NameError::Absolute(raw.to_owned()));
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => continue,
            ".." => return Err(NameError::Traversal(raw.to_owned())),
            _ if part.len() > MAX_COMPONENT => return Err(invalid("a component is longer than 255 bytes")),
            _ if part.chars().all(|c| c == '.') => return Err(invalid("a component is only dots")),
            _ if is_device(part) => return Err(invalid("a component is a device name (CON, NUL, COM1, ...)")),
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(invalid("it is empty"));
    }
    if parts.len() > MAX_DEPTH {
        return Err(invalid("it is nested deeper than 16 directories"));
    }
    let name = parts.join("/");
    if name.len() > MAX_NAME {
        return Err(invalid("it is longer than 1024 bytes"));
    }
    Ok(name)
}

fn is_device(part: &str) -> bool {
    let stem = part.split('.').next().unwrap_or(part).trim_end().to_ascii_lowercase();
    DEVICES.contains(&stem.as_str())
}

/// The names of one upload so far: refuses a second file of a name, and a file where
/// another needs a directory (`a` and `a/b`).
#[derive(Debug, Default)]
pub struct NameSet {
    files: BTreeSet<String>,
    dirs: BTreeSet<String>,
}

impl NameSet {
    /// Records a normalised name, or says why it clashes with those before it.
    pub fn add(&mut self, name: &str) -> Result<(), NameError> {
        let clash = || NameError::Duplicate(name.to_owned());
        if self.files.contains(name) || self.dirs.contains(name) {
            return Err(clash());
        }
        let parents: Vec<&str> = name.match_indices('/').map(|(at, _)| &name[..at]).collect();
        if parents.iter().any(|parent| self.files.contains(*parent)) {
            return Err(clash());
        }
        self.dirs.extend(parents.into_iter().map(str::to_owned));
        self.files.insert(name.to_owned());
        Ok(())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.files.contains(name)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_normalised() {
        assert_eq!(normalise("run.sh"), Ok("run.sh".into()));
        assert_eq!(normalise("./data//in.csv"), Ok("data/in.csv".into()));
        assert_eq!(normalise("a/./b/"), Ok("a/b".into()));
        assert_eq!(normalise("données é.txt"), Ok("données é.txt".into()));
        assert_eq!(normalise(".hidden"), Ok(".hidden".into()));
        assert_eq!(normalise("console.log"), Ok("console.log".into()));
    }

    #[test]
    fn names_that_could_escape_or_harm_are_refused() {
        assert!(matches!(normalise("../x"), Err(NameError::Traversal(_))));
        assert!(matches!(normalise("a/../../x"), Err(NameError::Traversal(_))));
        assert!(matches!(normalise("/etc/x"), Err(NameError::Absolute(_))));
        assert!(matches!(normalise("~/x"), Err(NameError::Absolute(_))));
        for bad in ["a\0b", "a\nb", "a\\b", "", ".", "./", "...", "CON", "nul.txt", "dir/Com1.log", "lpt9 "] {
            assert!(matches!(normalise(bad), Err(NameError::Invalid { .. })), "{bad:?}");
        }
        assert!(normalise(&"x".repeat(256)).is_err());
        assert!(normalise(&["d"; 17].join("/")).is_err());
        assert!(normalise(&vec!["y".repeat(200); 6].join("/")).is_err(), "over 1024 bytes");
    }

    #[test]
    fn a_name_is_used_once() {
        let mut names = NameSet::default();
        names.add("run.sh").unwrap();
        names.add("data/a").unwrap();
        assert!(names.add("run.sh").is_err());
        assert!(names.add("data").is_err(), "a directory already");
        assert!(names.add("data/a/b").is_err(), "a file already");
        names.add("data/b").unwrap();
        assert_eq!(names.len(), 3);
    }
}
