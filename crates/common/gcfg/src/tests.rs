use std::time::Duration;

use super::*;

#[track_caller]
fn assert_error(text: &str, line: usize, key: Option<&str>, needle: &str) {
    let e = parse(text).expect_err("refused");
    assert_eq!(e.line, Some(line), "{e}");
    assert_eq!(e.key.as_deref(), key, "{e}");
    let shown = e.to_string();
    assert!(shown.contains(needle), "{shown:?} lacks {needle:?}");
    assert!(shown.contains(&format!("line {line}")), "{shown}");
}

fn value<'a>(doc: &'a Document, section: &str, key: &str) -> Option<&'a str> {
    doc.last(section, "", key).and_then(|e| e.value.as_deref())
}

#[test]
fn sections_entries_and_lines_in_file_order() {
    let doc = parse("; comment\n[Global]\nRegion = a\n\n# more\n[Other \"Sub\"]\nflag\nk=v\n").unwrap();
    assert_eq!(
        doc.sections,
        [
            Section {
                name: "Global".into(),
                sub: None,
                line: 2,
                entries: vec![Entry {
                    name: "Region".into(),
                    line: 3,
                    value: Some("a".into())
                }],
            },
            Section {
                name: "Other".into(),
                sub: Some("Sub".into()),
                line: 6,
                entries: vec![
                    Entry {
                        name: "flag".into(),
                        line: 7,
                        value: None
                    },
                    Entry {
                        name: "k".into(),
                        line: 8,
                        value: Some("v".into())
                    },
                ],
            },
        ]
    );
    assert_eq!(parse("").unwrap(), Document::default());
    assert_eq!(parse("\n  \n; x\n").unwrap(), Document::default());
}

#[test]
fn section_and_key_names_are_case_insensitive_subsections_are_not() {
    let doc =
        parse("[global]\nREGION = a\n[GLOBAL]\nregion = b\n[Class \"X\"]\nk = 1\n[class \"x\"]\nk = 2\n")
            .unwrap();
    assert_eq!(value(&doc, "Global", "Region"), Some("b"));
    assert_eq!(doc.entries("Global", "").count(), 2);
    assert_eq!(doc.subsections("CLASS"), [("X", 5), ("x", 7)]);
    assert_eq!(doc.last("class", "X", "K").unwrap().value.as_deref(), Some("1"));
    // Blanks around the brackets and the name are allowed, as gcfg allows them.
    let doc = parse("[ Global ]\nRegion=ap-south-1").unwrap();
    assert_eq!(value(&doc, "global", "region"), Some("ap-south-1"));
    // A bare header of a subsection map is the subsection "" (gcfg).
    let doc = parse("[Class]\nk = 0\n[Class \"a\"]\n[Class]\nk = 3").unwrap();
    assert_eq!(doc.subsections("Class"), [("", 1), ("a", 3)]);
    assert_eq!(doc.last("Class", "", "k").unwrap().line, 5);
}

#[test]
fn values_are_unquoted_and_unescaped_as_gcfg_does() {
    let doc = parse(
        "[Global]\n\
         Region = \"eu-west-1\" ; a comment\n\
         A = sg-1 # another\n\
         B = \"vpc-;#\"\n\
         C = a\"b c\"d   \n\
         D = \"tab\\tnew\\nquote\\\"back\\\\\"\n\
         E = x\\\"y\n\
         F = /one \\\n   two\n\
         G = \"  \"\n\
         H =\n\
         I = \"\"\n",
    )
    .unwrap();
    let v = |k| value(&doc, "Global", k).unwrap();
    assert_eq!(v("Region"), "eu-west-1");
    assert_eq!(v("A"), "sg-1");
    assert_eq!(v("B"), "vpc-;#");
    assert_eq!(v("C"), "ab cd");
    assert_eq!(v("D"), "tab\tnew\nquote\"back\\");
    assert_eq!(v("E"), "x\"y");
    // A continuation line: the value keeps the blanks before the `\` and those that start the
    // next line, and the key keeps its first line.
    assert_eq!(v("F"), "/one    two");
    assert_eq!(doc.last("Global", "", "F").unwrap().line, 8);
    assert_eq!(doc.last("Global", "", "J"), None);
    assert_eq!(v("G"), "  ");
    assert_eq!(v("H"), "");
    assert_eq!(v("I"), "");
    // A line after a continued value has its own number.
    let doc = parse("[G]\na = 1\\\n2\nb = 3\n").unwrap();
    assert_eq!(
        (value(&doc, "G", "a"), doc.last("G", "", "b").unwrap().line),
        (Some("12"), 4)
    );
}

#[test]
fn blank_keys_have_no_value() {
    let doc = parse("[G]\nflag\nother ; yes\nthird # x\n").unwrap();
    assert!(doc.entries("G", "").all(|e| e.value.is_none()));
}

#[test]
fn crlf_files_and_a_byte_order_mark_read_the_same() {
    let lf = parse("[Global]\nRegion = us-west-1\nVPC=vpc-2\nflag\nq = \"a b\" \n").unwrap();
    let crlf =
        parse("\u{feff}[Global]\r\nRegion = us-west-1\r\nVPC=vpc-2\r\nflag\r\nq = \"a b\" \r\n").unwrap();
    assert_eq!(lf, crlf);
    // A continuation line in a CRLF file.
    let doc = parse("[G]\r\na = 1 \\\r\n 2\r\n").unwrap();
    assert_eq!(value(&doc, "G", "a"), Some("1  2"));
}

#[test]
fn the_last_value_wins_and_multi_valued_keys_accumulate() {
    let doc = parse("[G]\nk = 1\nm = a\n[G]\nk = 2\nm = b\nM = c\n").unwrap();
    assert_eq!(doc.last("G", "", "k").unwrap().value.as_deref(), Some("2"));
    let values = |doc: &Document| -> Vec<String> {
        doc.multi("G", "", "m")
            .iter()
            .map(|e| e.value.clone().unwrap())
            .collect()
    };
    assert_eq!(values(&doc), ["a", "b", "c"]);
    // A blank key clears the list.
    assert_eq!(values(&parse("[G]\nm = a\nm\nm = b\n").unwrap()), ["b"]);
    assert!(values(&parse("[G]\nm = a\nm\n").unwrap()).is_empty());
    // Other sections do not count.
    assert!(values(&parse("[H]\nm = a\n[G \"x\"]\nm = b\n").unwrap()).is_empty());
}

#[test]
fn unknown_sections_subsections_and_keys_are_named() {
    const SCHEMA: &[SectionSchema<'_>] = &[
        SectionSchema {
            name: "Global",
            subsections: false,
            keys: &["Region", "auth-url"],
        },
        SectionSchema {
            name: "Class",
            subsections: true,
            keys: &["k"],
        },
    ];
    let doc = parse(
        "[global]\nregion = a\nAUTH-URL = b\nNoSuchKey = 1\n[Extra]\nAnything = goes\n[Extra \"sub\"]\n\
         [Global \"sub\"]\nRegion = ignored\n[class \"x\"]\nk = 1\nColour = blue\n[Class]\nj\n",
    )
    .unwrap();
    let shown: Vec<String> = doc.unknown(SCHEMA).iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "line 4: [Global] NoSuchKey (unknown key, ignored as upstream ignores it)",
            "line 5: [Extra] (unknown section, ignored as upstream ignores it)",
            "line 7: [Extra \"sub\"] (unknown section, ignored as upstream ignores it)",
            "line 8: [Global \"sub\"] ([Global] takes no subsection; its keys are ignored)",
            "line 12: [Class \"x\"] Colour (unknown key, ignored as upstream ignores it)",
            "line 14: [Class \"\"] j (unknown key, ignored as upstream ignores it)",
        ]
    );
    assert_eq!(SCHEMA[0].key("AUTH-url"), Some("auth-url"));
    assert_eq!(SCHEMA[0].key("auth_url"), None);
}

#[test]
fn malformed_files_name_the_line_and_key() {
    assert_error("Region = x\n", 1, Some("Region"), "before any section header");
    assert_error("[Global]\nRegion = x\n[Global\n", 3, None, "expected ']'");
    assert_error("\n[]\n", 2, None, "expected a section name");
    assert_error("[Global] x\n", 1, None, "unexpected 'x' after a section header");
    assert_error("[S \"\"]\n", 1, None, "empty subsection name");
    assert_error("[S \"1]\n", 1, None, "no closing quote");
    assert_error("[S \"1\n\"]\n", 1, None, "no closing quote");
    assert_error("[S \"a\\qb\"]\n", 1, None, "unknown escape sequence");
    assert_error(
        "[Global]\nRegion = \"eu-west-1\n",
        2,
        Some("Region"),
        "no closing quote",
    );
    assert_error(
        "[Global]\nRegion = \"a\\\nb\"\n",
        2,
        Some("Region"),
        "no closing quote",
    );
    assert_error(
        "[Global]\n\nVPC = \"a\\qb\"\n",
        3,
        Some("VPC"),
        "unknown escape sequence \\q",
    );
    assert_error("[Global]\nVPC = a\\b\n", 2, Some("VPC"), "unquoted '\\'");
    assert_error("[Global]\nRegion us-east-1\n", 2, Some("Region"), "expected '='");
    assert_error("[Global]\n= x\n", 2, None, "expected a section header or a key");
    assert_error(
        "[Global]\n-x = 1\n",
        2,
        None,
        "expected a section header or a key",
    );
    // The Display names the file, the line and the key.
    let e = Error::at(3, Some("[Global] Region".into()), "bad").in_file(Path::new("/etc/c.conf"));
    assert_eq!(
        e.to_string(),
        "cloud config /etc/c.conf, line 3, [Global] Region: bad"
    );
}

#[test]
fn parse_prefix_keeps_what_comes_before_the_first_syntax_error() {
    let (doc, error) = parse_prefix("[G]\na = 1\nb = \"2\nc = 3\n");
    assert_eq!(doc.entries("G", "").count(), 1);
    assert_eq!(error.unwrap().line, Some(3));
    let (doc, error) = parse_prefix("[G]\na = 1\n");
    assert_eq!((doc.entries("G", "").count(), error), (1, None));
}

#[test]
fn read_names_the_file() {
    let dir = std::env::temp_dir().join(format!("gcfg-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.conf");
    std::fs::write(&path, "[Global]\nRegion = \"eu-west-1\n").unwrap();
    let shown = read(&path).unwrap_err().to_string();
    assert!(shown.contains(&path.display().to_string()), "{shown}");
    assert!(shown.contains("line 2, Region"), "{shown}");
    std::fs::write(&path, b"[Global]\nRegion = eu-\xff\n").unwrap();
    let e = read(&path).unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (Some(2), "not UTF-8"));
    std::fs::write(&path, "[Global]\nRegion = eu-west-1\n").unwrap();
    assert_eq!(
        value(&read(&path).unwrap(), "Global", "Region"),
        Some("eu-west-1")
    );
    let missing = read(&dir.join("missing.conf")).unwrap_err().to_string();
    assert!(
        missing.contains("missing.conf") && missing.contains("cannot read it"),
        "{missing}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn booleans_read_as_gcfg_reads_them() {
    for (text, expected) in [
        ("true", true),
        ("YES", true),
        ("On", true),
        ("1", true),
        ("false", false),
        ("no", false),
        ("OFF", false),
        ("0", false),
    ] {
        assert_eq!(parse_bool(text), Some(expected), "{text}");
    }
    for bad in ["maybe", "", "2", "t", " true"] {
        assert_eq!(parse_bool(bad), None, "{bad}");
    }
    let doc = parse("[G]\na\nb = \"yes\"\nc = sure\n").unwrap();
    let entries: Vec<&Entry> = doc.entries("G", "").collect();
    assert_eq!(entries[0].boolean("[G] a"), Ok(true), "a blank key is true");
    assert_eq!(entries[1].boolean("[G] b"), Ok(true));
    let e = entries[2].boolean("[G] c").unwrap_err();
    assert_eq!(
        e.to_string(),
        "cloud config, line 4, [G] c: \"sure\" is not a boolean (true/false, yes/no, on/off, 1/0)"
    );
}

#[test]
fn integers_are_decimal_or_hexadecimal_and_range_checked() {
    assert_eq!(parse_int::<i32>("42"), Ok(42));
    assert_eq!(parse_int::<i32>(" -7 "), Ok(-7));
    assert_eq!(parse_int::<i32>("+7"), Ok(7));
    assert_eq!(parse_int::<i32>("0x2818"), Ok(10264));
    assert_eq!(parse_int::<i32>("-0x10"), Ok(-16));
    assert_eq!(parse_int::<u64>("18446744073709551615"), Ok(u64::MAX));
    assert_eq!(parse_int::<i64>("-9223372036854775808"), Ok(i64::MIN));
    assert_eq!(parse_int::<u8>("0xff"), Ok(255));
    for bad in ["", "ten", "1.5", "0x", "0xg", "1e3", "--1", "1 2", "010x"] {
        assert_eq!(parse_int::<i32>(bad), Err(IntError::Syntax(bad.into())), "{bad}");
    }
    assert_eq!(
        parse_int::<i32>("99999999999").unwrap_err().to_string(),
        "\"99999999999\" is out of range (-2147483648 to 2147483647)"
    );
    assert!(matches!(parse_int::<u32>("-1"), Err(IntError::Range { .. })));
    assert!(matches!(
        parse_int::<u64>("999999999999999999999999999999999999999999"),
        Err(IntError::Range { .. })
    ));
    let doc = parse("[G]\nn = 0x10\nm\nb = x\n").unwrap();
    let entries: Vec<&Entry> = doc.entries("G", "").collect();
    assert_eq!(entries[0].int::<u16>("n"), Ok(16));
    assert_eq!(entries[1].int::<u16>("m").unwrap_err().message, NEEDS_A_VALUE);
    assert!(
        entries[2]
            .int::<u16>("b")
            .unwrap_err()
            .message
            .contains("not an integer")
    );
}

#[test]
fn durations_read_as_go_reads_them() {
    let ms = Duration::from_millis;
    for (text, expected) in [
        ("0", Duration::ZERO),
        ("-0", Duration::ZERO),
        ("+0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("-0s", Duration::ZERO),
        ("5s", ms(5_000)),
        ("+5s", ms(5_000)),
        ("1m30s", ms(90_000)),
        ("1m", ms(60_000)),
        ("1.5h", ms(5_400_000)),
        ("300ms", ms(300)),
        (".5s", ms(500)),
        ("5.s", ms(5_000)),
        ("1h2m3s4ms5us6ns", Duration::new(3_723, 4_005_006)),
        ("2\u{b5}s", Duration::from_micros(2)),
        ("2\u{3bc}s", Duration::from_micros(2)),
        ("1.000000001s", Duration::new(1, 1)),
        ("0.1234567891234567891234s", Duration::from_nanos(123_456_789)),
        ("9223372036854775807ns", Duration::from_nanos(i64::MAX as u64)),
    ] {
        assert_eq!(parse_duration(text), Ok(expected), "{text}");
    }
    for (bad, needle) in [
        ("5", "without a unit"),
        ("00", "without a unit"),
        ("", "not a Go duration"),
        ("-", "not a Go duration"),
        ("s", "not a Go duration"),
        (".s", "not a Go duration"),
        ("1.5", "without a unit"),
        ("5 s", "unknown unit \" s\""),
        ("5sec", "unknown unit \"sec\""),
        ("5S", "unknown unit \"S\""),
        ("1d", "unknown unit \"d\""),
        ("-1s", "negative"),
        ("9223372036854775808ns", "too long"),
        ("2562048h", "too long"),
        ("99999999999999999999s", "too long"),
    ] {
        let e = parse_duration(bad).expect_err(bad);
        assert!(e.contains(needle), "{bad}: {e}");
    }
    let doc = parse("[G]\nd = 1m\ne\nf = 5\n").unwrap();
    let entries: Vec<&Entry> = doc.entries("G", "").collect();
    assert_eq!(entries[0].duration("d"), Ok(ms(60_000)));
    assert_eq!(entries[1].duration("e").unwrap_err().message, NEEDS_A_VALUE);
    let e = entries[2].duration("[G] f").unwrap_err();
    assert_eq!((e.line, e.key.as_deref()), (Some(4), Some("[G] f")));
}

#[test]
fn to_text_parses_back_to_the_same_document() {
    let doc =
        parse("[Global]\nRegion = \" a;#\\\"b\\\\\\t\\n \"\nflag\n[S \"q\\\"x\\\\y\"]\nk=\n[S]\n").unwrap();
    assert_eq!(parse(&doc.to_text()).unwrap(), doc);
}

/// A section without line numbers: its name, subsection and entries (name, value).
type SectionShape = (String, Option<String>, Vec<(String, Option<String>)>);

/// The document without line numbers: what a printed and re-parsed document must keep.
fn shape(doc: &Document) -> Vec<SectionShape> {
    doc.sections
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.sub.clone(),
                s.entries
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect(),
            )
        })
        .collect()
}

fn name() -> impl proptest::strategy::Strategy<Value = String> {
    "[a-zA-Zé][a-zA-Z0-9é-]{0,8}"
}

proptest::proptest! {
    /// Any text is parsed or refused with a line, never a panic; what parses prints and parses
    /// back to the same document.
    #[test]
    fn fuzz_parse_never_panics_and_round_trips(text in "(\\[|\\]|\"|\\\\|=|;|#|\n|\r|\r\n| |\t|\u{feff}|é|[a-zA-Z0-9-]{1,8}|Global|sub|\\\\n|\\\\\"){0,50}") {
        match parse(&text) {
            Ok(doc) => {
                let again = parse(&doc.to_text());
                proptest::prop_assert!(again.is_ok(), "{:?} -> {:?}", doc.to_text(), again);
                proptest::prop_assert_eq!(shape(&again.unwrap()), shape(&doc));
            }
            Err(e) => proptest::prop_assert!(e.line.is_some(), "{}", e),
        }
    }

    /// Arbitrary Unicode is parsed or refused, never a panic.
    #[test]
    fn fuzz_any_text_never_panics(text in proptest::prelude::any::<String>()) {
        if let Err(e) = parse(&text) {
            proptest::prop_assert!(e.line.is_some(), "{}", e);
        }
    }

    /// A document built from any names and values (every value gcfg can hold) prints and parses
    /// back to the same document, lines included.
    #[test]
    fn fuzz_printed_documents_read_back(
        sections in proptest::collection::vec(
            (
                name(),
                proptest::option::of("[^\n]{1,6}"),
                proptest::collection::vec((name(), proptest::option::of("[^\r]{0,8}")), 0..4),
            ),
            0..4,
        )
    ) {
        let mut doc = Document::default();
        let mut line = 1;
        #[allow(clippy::explicit_counter_loop)] // entries advance the line too
        for (name, sub, entries) in sections {
            let header = line;
            line += 1;
            let entries = entries
                .into_iter()
                .map(|(name, value)| {
                    line += 1;
                    Entry { name, line: line - 1, value }
                })
                .collect();
            doc.sections.push(Section { name, sub, line: header, entries });
        }
        proptest::prop_assert_eq!(parse(&doc.to_text()), Ok(doc));
    }

    /// Integers print and read back, and anything else is refused without a panic.
    #[test]
    fn fuzz_integers(n in proptest::prelude::any::<i64>(), text in "[-+ 0-9a-fA-Fx]{0,24}") {
        proptest::prop_assert_eq!(parse_int::<i64>(&n.to_string()), Ok(n));
        proptest::prop_assert_eq!(parse_int::<i64>(&format!("{}0x{:x}", if n < 0 { "-" } else { "" }, n.unsigned_abs())), Ok(n));
        let _ = parse_int::<u16>(&text);
    }

    /// Go durations: whole seconds, minutes and hours read back; anything else never panics.
    #[test]
    fn fuzz_durations(h in 0u64..1000, m in 0u64..60, s in 0u64..60, ms in 0u64..1000, text in "[-+.0-9a-zµμ]{0,16}") {
        let d = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
        proptest::prop_assert_eq!(parse_duration(&format!("{h}h{m}m{s}s{ms}ms")), Ok(d));
        let _ = parse_duration(&text);
    }
}
