//! The gcfg format (git-config style INI) as `gopkg.in/gcfg.v1` reads it: the one reader of the
//! cloud-config files of cloud-provider-aws (`--cloud-config`) and of the OpenStack CCM
//! (`cloud.conf`), with every error naming its line and key.
//!
//! # Why hand-written
//! No maintained Rust crate reads gcfg as Go's gcfg.v1 does (checked on crates.io): there is no
//! `gcfg` crate; `rust-ini` reads another INI dialect (no `[section "sub"]` headers, no gcfg
//! quoting and escapes, no continuation lines, no blank keys); `gix-config` reads git's config
//! format, a superset with other rules (`[section.sub]`, includes, `\b` escapes, different value
//! trimming) and gitoxide's dependencies; `gitconfig` parses `git config --list` output. What is
//! needed is small (a scanner, a document, four value types), and being exact matters: the same
//! file must mean the same thing to us and to the Go CCM it replaces.
//!
//! # The format
//! - `[Section]` and `[Section "subsection"]` headers; section and key names are
//!   case-insensitive, subsection names are not; `[Section ""]` is an error. Names are a letter,
//!   then letters, digits and `-`.
//! - `key = value`; the value runs to the end of the line or to a `;`/`#` comment, with
//!   surrounding blanks dropped. Double quotes may enclose any part of it (blanks and `;#` inside
//!   are kept) with the escapes `\\`, `\"`, `\n` and `\t`; outside quotes, `\"` is a quote and a
//!   `\` at the end of a line continues the value on the next line. Carriage returns (CRLF files)
//!   are dropped; a leading byte-order mark is skipped.
//! - A key without `=` is "blank" ([`Entry::value`] is `None`): `true` for a boolean, clears a
//!   multi-valued key, an error for any other type.
//! - A key given twice: the last value wins ([`Document::last`]), except multi-valued keys, whose
//!   values accumulate ([`Document::multi`]). Sections given twice merge.
//! - Unknown sections and keys are ignored by both Go CCMs (`gcfg.FatalOnly`);
//!   [`Document::unknown`] names each, so a provider can say so once at start.
//!
//! Values: [`parse_bool`] (gcfg's booleans), [`parse_int`] (decimal or `0x` hexadecimal, range
//! checked), [`parse_duration`] (Go's `time.ParseDuration`, which OCCM's durations use).
//!
//! One difference from Go, on purpose: names compare case-insensitively in ASCII only. Go's
//! `strings.EqualFold` also folds a few non-ASCII letters onto ASCII ones (the Kelvin sign onto
//! `k`, the long s onto `s`); every name either provider knows is ASCII, so such a spelling is
//! an unknown key here.

use std::{fmt, path::Path, time::Duration};

/// Why a file cannot be used: the line and key (when there is one) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    /// The file, when read from one.
    pub path: Option<String>,
    /// The line (1-based), when the error is about one.
    pub line: Option<usize>,
    /// The key, e.g. `[Global] Region`, when the error is about one.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cloud config")?;
        if let Some(path) = &self.path {
            write!(f, " {path}")?;
        }
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ", {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl Error {
    /// An error about `line` (and `key`, when there is one).
    pub fn at(line: usize, key: Option<String>, message: impl Into<String>) -> Self {
        Self {
            path: None,
            line: Some(line),
            key,
            message: message.into(),
        }
    }

    /// The same error, naming the file it is in.
    pub fn in_file(mut self, path: &Path) -> Self {
        self.path = Some(path.display().to_string());
        self
    }
}

/// The message of a key before any section header.
pub const KEY_BEFORE_SECTION: &str = "a key before any section header";

/// The message of a blank key whose type needs a value.
pub const NEEDS_A_VALUE: &str = "needs a value ('key = value')";

/// Something in the file that has no effect; a provider logs these once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// Its line.
    pub line: usize,
    /// What it is, e.g. `[Global] Foo`.
    pub what: String,
    /// Why it has no effect.
    pub why: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {} ({})", self.line, self.what, self.why)
    }
}

/// One `key = value` (or blank `key`) line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as written.
    pub name: String,
    /// The line of the key (1-based; a continued value keeps its first line).
    pub line: usize,
    /// The value, unquoted and unescaped; `None` for a blank key (no `=`).
    pub value: Option<String>,
}

/// One section header and the entries under it, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The section name as written.
    pub name: String,
    /// The subsection name (never empty), when the header has one.
    pub sub: Option<String>,
    /// The line of the header.
    pub line: usize,
    /// The entries in file order.
    pub entries: Vec<Entry>,
}

impl Section {
    /// Whether this is section `name` (case-insensitive).
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }

    /// The subsection name as gcfg stores it: `""` for none.
    pub fn sub_or_empty(&self) -> &str {
        self.sub.as_deref().unwrap_or("")
    }
}

/// A parsed file: every section header in file order, each with its entries in file order.
/// Repeated headers stay separate here; the lookups ([`Document::entries`], [`Document::last`],
/// [`Document::multi`]) merge them as gcfg does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// The sections in file order.
    pub sections: Vec<Section>,
}

/// What a provider knows of one section, for [`Document::unknown`].
#[derive(Debug, Clone, Copy)]
pub struct SectionSchema<'a> {
    /// The section name, in the spelling notices use.
    pub name: &'a str,
    /// A subsection map (`[LoadBalancerClass "x"]`): a bare header is the subsection `""`. A
    /// section that is not one ignores headers with a subsection, as gcfg does.
    pub subsections: bool,
    /// Its keys, in the spelling notices and errors use.
    pub keys: &'a [&'a str],
}

impl SectionSchema<'_> {
    /// The schema's spelling of key `name` (case-insensitive), if it is one.
    pub fn key(&self, name: &str) -> Option<&str> {
        self.keys.iter().copied().find(|k| k.eq_ignore_ascii_case(name))
    }
}

impl Document {
    /// Every section named `name` (case-insensitive), with or without a subsection.
    pub fn sections<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a Section> + use<'a, 'n> {
        self.sections.iter().filter(move |s| s.is(name))
    }

    /// The entries of every `[section]` header (`sub` = `""`) or every `[section "sub"]` header,
    /// in file order: repeated sections merge.
    pub fn entries<'a, 'n>(
        &'a self,
        section: &'n str,
        sub: &'n str,
    ) -> impl Iterator<Item = &'a Entry> + use<'a, 'n> {
        self.sections(section)
            .filter(move |s| s.sub_or_empty() == sub)
            .flat_map(|s| &s.entries)
    }

    /// The last entry of `key` (case-insensitive) in that section: the one that wins.
    pub fn last(&self, section: &str, sub: &str, key: &str) -> Option<&Entry> {
        self.entries(section, sub)
            .filter(|e| e.name.eq_ignore_ascii_case(key))
            .last()
    }

    /// A multi-valued key: its entries with a value, in file order, after the last blank one
    /// (a blank key clears the list, as gcfg).
    pub fn multi(&self, section: &str, sub: &str, key: &str) -> Vec<&Entry> {
        let mut values = Vec::new();
        for e in self
            .entries(section, sub)
            .filter(|e| e.name.eq_ignore_ascii_case(key))
        {
            if e.value.is_none() {
                values.clear();
            } else {
                values.push(e);
            }
        }
        values
    }

    /// The subsection names of `section` (`""` for a bare header) in order of first appearance,
    /// each with the line of its first header.
    pub fn subsections(&self, section: &str) -> Vec<(&str, usize)> {
        let mut subs: Vec<(&str, usize)> = Vec::new();
        for s in self.sections(section) {
            if !subs.iter().any(|(name, _)| *name == s.sub_or_empty()) {
                subs.push((s.sub_or_empty(), s.line));
            }
        }
        subs
    }

    /// Everything the schema does not know, in file order: unknown sections, subsections of a
    /// section that takes none, and unknown keys of known sections. gcfg ignores them (both Go
    /// CCMs read with `gcfg.FatalOnly`); a provider names them in one warning at start.
    pub fn unknown(&self, schema: &[SectionSchema<'_>]) -> Vec<Notice> {
        let mut notices = Vec::new();
        for s in &self.sections {
            let Some(known) = schema.iter().find(|k| s.is(k.name)) else {
                notices.push(Notice {
                    line: s.line,
                    what: match &s.sub {
                        Some(sub) => format!("[{} {sub:?}]", s.name),
                        None => format!("[{}]", s.name),
                    },
                    why: "unknown section, ignored as upstream ignores it".into(),
                });
                continue;
            };
            let header = match (&s.sub, known.subsections) {
                (Some(sub), false) => {
                    notices.push(Notice {
                        line: s.line,
                        what: format!("[{} {sub:?}]", s.name),
                        why: format!("[{}] takes no subsection; its keys are ignored", known.name),
                    });
                    continue;
                }
                (_, true) => format!("[{} {:?}]", known.name, s.sub_or_empty()),
                (None, false) => format!("[{}]", known.name),
            };
            for e in &s.entries {
                if known.key(&e.name).is_none() {
                    notices.push(Notice {
                        line: e.line,
                        what: format!("{header} {}", e.name),
                        why: "unknown key, ignored as upstream ignores it".into(),
                    });
                }
            }
        }
        notices
    }

    /// The document as gcfg text that parses back to the same sections, entries and values:
    /// every value quoted and escaped. A value with a carriage return, or a subsection name with
    /// a newline, cannot be written in gcfg and never comes out of [`parse`].
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for s in &self.sections {
            out.push('[');
            out.push_str(&s.name);
            if let Some(sub) = &s.sub {
                out.push_str(" \"");
                for c in sub.chars() {
                    if matches!(c, '\\' | '"') {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
            }
            out.push_str("]\n");
            for e in &s.entries {
                out.push_str(&e.name);
                if let Some(value) = &e.value {
                    out.push_str(" = \"");
                    for c in value.chars() {
                        match c {
                            '\\' => out.push_str("\\\\"),
                            '"' => out.push_str("\\\""),
                            '\n' => out.push_str("\\n"),
                            '\t' => out.push_str("\\t"),
                            c => out.push(c),
                        }
                    }
                    out.push('"');
                }
                out.push('\n');
            }
        }
        out
    }
}

impl Entry {
    /// The value of a key that needs one (a string, a number, a duration): a blank key is an
    /// error naming `key` (how errors name it, e.g. `[Global] Region`).
    pub fn text(&self, key: &str) -> Result<&str, Error> {
        self.value
            .as_deref()
            .ok_or_else(|| Error::at(self.line, Some(key.to_owned()), NEEDS_A_VALUE))
    }

    /// A boolean: a blank key is `true`.
    pub fn boolean(&self, key: &str) -> Result<bool, Error> {
        match &self.value {
            None => Ok(true),
            Some(text) => parse_bool(text).ok_or_else(|| {
                Error::at(
                    self.line,
                    Some(key.to_owned()),
                    format!("{text:?} is not a boolean (true/false, yes/no, on/off, 1/0)"),
                )
            }),
        }
    }

    /// An integer of type `T` (decimal or `0x` hexadecimal, in `T`'s range).
    pub fn int<T: Int>(&self, key: &str) -> Result<T, Error> {
        let text = self.text(key)?;
        parse_int(text).map_err(|e| Error::at(self.line, Some(key.to_owned()), e.to_string()))
    }

    /// A Go duration (`300ms`, `1m30s`, `1.5h`; `0`).
    pub fn duration(&self, key: &str) -> Result<Duration, Error> {
        let text = self.text(key)?;
        parse_duration(text).map_err(|m| Error::at(self.line, Some(key.to_owned()), m))
    }
}

/// Reads a file as text; errors name it (and the line of the first byte that is not UTF-8).
pub fn read_to_string(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error {
            path: None,
            line: None,
            key: None,
            message: format!("cannot read it: {e}"),
        }
        .in_file(path)
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
        Error::at(line, None, "not UTF-8").in_file(path)
    })
}

/// Reads and parses the file at `path`; errors name it.
pub fn read(path: &Path) -> Result<Document, Error> {
    parse(&read_to_string(path)?).map_err(|e| e.in_file(path))
}

/// Parses gcfg text.
pub fn parse(text: &str) -> Result<Document, Error> {
    match parse_prefix(text) {
        (document, None) => Ok(document),
        (_, Some(e)) => Err(e),
    }
}

/// Parses gcfg text up to its first syntax error: the sections and entries before it, and the
/// error. A reader that checks values in file order and reports the first error it meets (as
/// gcfg does, setting each value as it scans) checks the entries, then returns the error.
pub fn parse_prefix(text: &str) -> (Document, Option<Error>) {
    let mut document = Document::default();
    let error = scan(text.strip_prefix('\u{feff}').unwrap_or(text), &mut document).err();
    (document, error)
}

fn scan(text: &str, document: &mut Document) -> Result<(), Error> {
    let mut scanner = Scanner::new(text);
    loop {
        scanner.skip_blanks();
        let line = scanner.line;
        match scanner.peek() {
            None => return Ok(()),
            Some('\n') => {
                scanner.bump();
            }
            Some(';' | '#') => scanner.skip_comment(),
            Some('[') => {
                scanner.bump();
                let (name, sub) = scanner.section_header()?;
                document.sections.push(Section {
                    name,
                    sub,
                    line,
                    entries: Vec::new(),
                });
            }
            Some(c) if is_letter(c) => {
                let name = scanner.identifier();
                let Some(section) = document.sections.last_mut() else {
                    return Err(Error::at(line, Some(name), KEY_BEFORE_SECTION));
                };
                scanner.skip_blanks();
                let value = match scanner.peek() {
                    None | Some('\n' | ';' | '#') => None,
                    Some('=') => {
                        scanner.bump();
                        scanner.skip_blanks();
                        Some(scanner.value(line, &name)?)
                    }
                    Some(c) => {
                        return Err(Error::at(
                            line,
                            Some(name),
                            format!("expected '=' after the key, found {c:?}"),
                        ));
                    }
                };
                section.entries.push(Entry { name, line, value });
            }
            Some(c) => {
                return Err(Error::at(
                    line,
                    None,
                    format!("expected a section header or a key, found {c:?}"),
                ));
            }
        }
    }
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic()
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r')
}

/// A character scanner over the text, following gcfg's.
struct Scanner<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            chars: text.chars().peekable(),
            line: 1,
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next();
        if c == Some('\n') {
            self.line += 1;
        }
        c
    }

    fn skip_blanks(&mut self) {
        while self.peek().is_some_and(is_blank) {
            self.bump();
        }
    }

    fn skip_comment(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// A section or key name: a letter, then letters, digits and `-`.
    fn identifier(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek().filter(|&c| c.is_alphanumeric() || c == '-') {
            name.push(c);
            self.bump();
        }
        name
    }

    /// The end of a line: a newline, the end of the text or a comment.
    fn end_of_line(&mut self, line: usize, after: &str) -> Result<(), Error> {
        self.skip_blanks();
        match self.peek() {
            None | Some('\n' | ';' | '#') => Ok(()),
            Some(c) => Err(Error::at(
                line,
                None,
                format!("unexpected {c:?} after {after} (expected the end of the line or a comment)"),
            )),
        }
    }

    /// `[` consumed: `name]` or `name "sub"]`.
    fn section_header(&mut self) -> Result<(String, Option<String>), Error> {
        let line = self.line;
        self.skip_blanks();
        if !self.peek().is_some_and(is_letter) {
            return Err(Error::at(line, None, "expected a section name after '['"));
        }
        let name = self.identifier();
        self.skip_blanks();
        let mut sub = None;
        if self.peek() == Some('"') {
            self.bump();
            let mut s = String::new();
            loop {
                match self.bump() {
                    Some('"') => break,
                    Some('\\') => match self.bump() {
                        Some(c @ ('\\' | '"')) => s.push(c),
                        other => {
                            return Err(Error::at(
                                line,
                                None,
                                format!(
                                    "unknown escape sequence \\{} in the subsection name of [{name}] (only \\\\ and \\\" are allowed there)",
                                    other.map(String::from).unwrap_or_default()
                                ),
                            ));
                        }
                    },
                    None | Some('\n') => {
                        return Err(Error::at(
                            line,
                            None,
                            format!("the subsection name of [{name}] has no closing quote"),
                        ));
                    }
                    Some(c) => s.push(c),
                }
            }
            if s.is_empty() {
                return Err(Error::at(
                    line,
                    None,
                    format!("empty subsection name in [{name} \"\"] (write [{name}] for none)"),
                ));
            }
            sub = Some(s);
            self.skip_blanks();
        }
        if self.peek() != Some(']') {
            return Err(Error::at(
                line,
                None,
                format!("expected ']' to close the header of section [{name}]"),
            ));
        }
        self.bump();
        self.end_of_line(line, "a section header")?;
        Ok((name, sub))
    }

    /// The value after `=` (blanks skipped): unquoted and unescaped, surrounding blanks dropped.
    fn value(&mut self, line: usize, key: &str) -> Result<String, Error> {
        let err = |m: String| Error::at(line, Some(key.to_owned()), m);
        let mut value = String::new();
        // Length of `value` up to its last character that is not an unquoted blank.
        let mut keep = 0;
        let mut quoted = false;
        loop {
            let Some(c) = self.peek() else {
                if quoted {
                    return Err(err("the value has no closing quote".into()));
                }
                break;
            };
            if !quoted && matches!(c, '\n' | ';' | '#') {
                break;
            }
            self.bump();
            match c {
                '"' => {
                    quoted = !quoted;
                    keep = value.len();
                }
                '\\' if quoted => match self.bump() {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('\n') | None => return Err(err("the value has no closing quote".into())),
                    Some(other) => {
                        return Err(err(format!(
                            "unknown escape sequence \\{other} (allowed: \\\\, \\\", \\n, \\t)"
                        )));
                    }
                },
                '\\' => {
                    if self.peek() == Some('\r') {
                        self.bump();
                    }
                    match self.bump() {
                        Some('"') => value.push('"'),
                        // A continuation line.
                        Some('\n') => {}
                        _ => {
                            return Err(err(
                                "an unquoted '\\' must end the line (a continuation) or precede '\"'".into(),
                            ));
                        }
                    }
                }
                '\n' => return Err(err("the value has no closing quote".into())),
                // gcfg drops carriage returns of CRLF files.
                '\r' => continue,
                c => value.push(c),
            }
            if quoted || !is_blank(c) {
                keep = value.len();
            }
        }
        value.truncate(keep);
        Ok(value)
    }
}

/// gcfg's booleans: `true`/`yes`/`on`/`1`, `false`/`no`/`off`/`0`, in any case. (A blank key,
/// which is `true`, is [`Entry::boolean`]'s business.)
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// The integer types gcfg reads (its default mode for them: decimal or `0x` hexadecimal).
pub trait Int: Copy + Sized {
    /// The smallest value.
    const MIN: i128;
    /// The largest value.
    const MAX: i128;
    /// The value, known to be in range.
    fn from_i128(v: i128) -> Self;
}

macro_rules! int {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const MIN: i128 = <$t>::MIN as i128;
            const MAX: i128 = <$t>::MAX as i128;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
    )*};
}
int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

/// Why text is not an integer of the type asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntError {
    /// Not a number at all.
    #[error("{0:?} is not an integer (decimal, or hexadecimal with 0x)")]
    Syntax(String),
    /// A number outside the type's range.
    #[error("{text:?} is out of range ({min} to {max})")]
    Range {
        /// The text.
        text: String,
        /// The smallest value allowed.
        min: i128,
        /// The largest value allowed.
        max: i128,
    },
}

/// gcfg's integers: decimal, or hexadecimal with a `0x` prefix, an optional sign, surrounding
/// blanks allowed, in `T`'s range. (Like this reader always has, `0X` and `+0x` are accepted
/// too; Go's `fmt.Sscanf` refuses those two spellings.)
pub fn parse_int<T: Int>(text: &str) -> Result<T, IntError> {
    let syntax = || IntError::Syntax(text.to_owned());
    let t = text.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let magnitude = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()) => {
            u128::from_str_radix(hex, 16).ok()
        }
        Some(_) => return Err(syntax()),
        None if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) => {
            digits.parse::<u128>().ok()
        }
        None => return Err(syntax()),
    };
    let range = || IntError::Range {
        text: text.to_owned(),
        min: T::MIN,
        max: T::MAX,
    };
    // Digits beyond u128 are out of every range.
    let magnitude = magnitude.and_then(|m| i128::try_from(m).ok()).ok_or_else(range)?;
    let value = if negative { -magnitude } else { magnitude };
    if (T::MIN..=T::MAX).contains(&value) {
        Ok(T::from_i128(value))
    } else {
        Err(range())
    }
}

/// A Go duration as `time.ParseDuration` reads it: an optional sign, then one or more decimal
/// numbers (with an optional fraction) each with a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`,
/// `h`): `300ms`, `1m30s`, `1.5h`, `.5s`. A bare number is an error, except `0`. At most
/// 2^63-1 ns (about 292 years), as Go.
///
/// Negative durations, which Go reads, are refused: neither CCM gives them a meaning (OCCM would
/// send Octavia a negative monitor delay, and a negative `request-timeout` silently turns the
/// timeout off). `-0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const HINT: &str = "a Go duration such as 300ms, 5s, 1m30s or 1.5h (units ns, us, ms, s, m, h)";
    let invalid = || format!("{text:?} is not {HINT}");
    let mut s = text;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u128 = 1 << 63;
    let overflow = || format!("{text:?} is too long a duration (at most about 292 years)");
    let mut total: u128 = 0;
    while !s.is_empty() {
        if !s.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        // The integer part.
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let mut whole: u128 = 0;
        for b in s[..digits].bytes() {
            whole = whole * 10 + u128::from(b - b'0');
            if whole > LIMIT {
                return Err(overflow());
            }
        }
        let pre = digits > 0;
        s = &s[digits..];
        // The fraction: digits past what a u64 holds are dropped, as Go.
        let (mut fraction, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(rest) = s.strip_prefix('.') {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let mut overflowed = false;
            for b in rest[..digits].bytes() {
                if overflowed {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(u64::from(b - b'0')))
                    .filter(|&f| f <= 1 << 63)
                {
                    Some(f) => {
                        fraction = f;
                        scale *= 10.0;
                    }
                    None => overflowed = true,
                }
            }
            post = digits > 0;
            s = &rest[digits..];
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(format!("{text:?} has a number without a unit: expected {HINT}"));
        }
        let unit: u128 = match &s[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => return Err(format!("{text:?} has an unknown unit {other:?}: expected {HINT}")),
        };
        s = &s[unit_len..];
        if whole > LIMIT / unit {
            return Err(overflow());
        }
        let mut value = whole * unit;
        if fraction > 0 {
            // As Go: float64(f) * (float64(unit) / scale), truncated.
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            let part = (fraction as f64 * (unit as f64 / scale)) as u128;
            value += part;
            if value > LIMIT {
                return Err(overflow());
            }
        }
        total += value;
        if total > LIMIT {
            return Err(overflow());
        }
    }
    if negative {
        if total == 0 {
            return Ok(Duration::ZERO);
        }
        return Err(format!(
            "{text:?} is negative: a duration here must be zero or more"
        ));
    }
    if total > LIMIT - 1 {
        return Err(overflow());
    }
    let nanos = u64::try_from(total).map_err(|_| overflow())?;
    Ok(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests;
