//! Config loading: YAML file, then flags, from one table.
//!
//! Every YAML key has exactly one flag, declared once in a [`FlagSpec`] table next to the config structs.
//! The table drives `--help`, the generated reference (`render_reference`) and the mapping from flag to key,
//! so the three cannot drift. Defaults come from the config's `Default` impl, serialised, so `--help` shows
//! the value the code really uses.
//!
//! Precedence: built-in defaults < `--config.file` YAML < flags given on the command line.

use crate::error::ConfigError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_norway::{Mapping, Value};
use std::path::PathBuf;

/// How a flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// `--flag=value`.
    Value,
    /// `--flag` alone means true; `--flag=false` also works.
    Bool,
    /// Repeatable: each occurrence adds one item to a YAML list.
    List,
}

/// One config key: its flag name (without `--`), its dotted YAML path, and its help text.
#[derive(Debug, Clone, Copy)]
pub struct FlagSpec {
    pub flag: &'static str,
    pub key: &'static str,
    pub kind: FlagKind,
    pub help: &'static str,
}

/// Where the configuration came from, for the startup log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Defaults,
    File(PathBuf),
}

const CONFIG_FILE_FLAG: &str = "config.file";
const PRINT_CONFIG_FLAG: &str = "print-config";

/// Parses `args` (including the program name) into `T`.
///
/// Returns `Err(clap::Error)`-style exits as `Ok(None)`-free: `--help` and usage errors are returned as
/// [`clap::Error`] inside `LoadError::Cli` so the binary can print them and exit with clap's code.
pub fn load<T>(
    name: &'static str,
    about: &'static str,
    specs: &[FlagSpec],
    args: impl IntoIterator<Item = String>,
) -> Result<(T, ConfigSource), LoadError>
where
    T: Serialize + DeserializeOwned + Default,
{
    let defaults = serde_norway::to_value(T::default()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let matches = command(name, about, specs, &defaults).try_get_matches_from(args)?;

    let (mut value, source) = match matches.get_one::<String>(CONFIG_FILE_FLAG) {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            // Parse into T first so unknown keys and type errors are reported against the file.
            let parsed: T = serde_norway::from_str(&text).map_err(|source| ConfigError::Yaml {
                path: path.clone(),
                source,
            })?;
            let v = serde_norway::to_value(parsed).map_err(|e| ConfigError::Invalid(e.to_string()))?;
            (v, ConfigSource::File(PathBuf::from(path)))
        }
        None => (defaults.clone(), ConfigSource::Defaults),
    };

    for spec in specs {
        if matches.value_source(spec.flag) != Some(clap::parser::ValueSource::CommandLine) {
            continue;
        }
        let raw: Vec<String> = matches
            .get_many::<String>(spec.flag)
            .map(|v| v.cloned().collect())
            .unwrap_or_default();
        let default_at = lookup(&defaults, spec.key);
        let new = coerce(spec, default_at, &raw)?;
        set(&mut value, spec.key, new);
    }

    let config: T = serde_norway::from_value(value).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if matches.get_flag(PRINT_CONFIG_FLAG) {
        let yaml = serde_norway::to_string(&config).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        return Err(LoadError::PrintConfig { yaml });
    }
    Ok((config, source))
}

/// A load that does not end in a config to run with: a command-line problem (including `--help`, which clap
/// reports as an "error" that prints help and exits 0), a config problem, or `--print-config`.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Cli(#[from] clap::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `--print-config`: the effective configuration (file, then flags, over the defaults) as YAML; print it
    /// and exit 0.
    #[error("--print-config")]
    PrintConfig { yaml: String },
}

fn command(name: &'static str, about: &'static str, specs: &[FlagSpec], defaults: &Value) -> clap::Command {
    let mut cmd = clap::Command::new(name)
        .about(about)
        .version(env!("CARGO_PKG_VERSION"))
        .arg(
            clap::Arg::new(CONFIG_FILE_FLAG)
                .long(CONFIG_FILE_FLAG)
                .value_name("FILE")
                .help("YAML configuration file; flags given on the command line override its values"),
        )
        .arg(
            clap::Arg::new(PRINT_CONFIG_FLAG)
                .long(PRINT_CONFIG_FLAG)
                .alias("print.config")
                .action(clap::ArgAction::SetTrue)
                .help("Print the effective configuration (defaults, then the file, then flags) as YAML and exit"),
        );
    for spec in specs {
        let mut arg = clap::Arg::new(spec.flag)
            .long(spec.flag)
            .help(help_line(spec, defaults));
        arg = match spec.kind {
            FlagKind::Value => arg.value_name("VALUE").num_args(1),
            FlagKind::Bool => arg
                .value_name("BOOL")
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .value_parser(["true", "false"]),
            FlagKind::List => arg.value_name("VALUE").num_args(1).action(clap::ArgAction::Append),
        };
        cmd = cmd.arg(arg);
    }
    cmd
}

fn help_line(spec: &FlagSpec, defaults: &Value) -> String {
    let default = lookup(defaults, spec.key).map(render_value).unwrap_or_default();
    if default.is_empty() {
        format!("{} [YAML: {}]", spec.help, spec.key)
    } else {
        format!("{} [default: {}] [YAML: {}]", spec.help, default, spec.key)
    }
}

fn render_value(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(items) => items.iter().map(render_value).collect::<Vec<_>>().join(","),
        other => serde_norway::to_string(other).unwrap_or_default().trim().to_owned(),
    }
}

/// Turns flag text into a YAML value of the same type as the default at that key, so `--x=123` sets a string
/// key to "123" and a number key to 123.
fn coerce(spec: &FlagSpec, default: Option<&Value>, raw: &[String]) -> Result<Value, ConfigError> {
    let bad = |value: &str, reason: &str| ConfigError::BadFlag {
        flag: spec.flag.to_owned(),
        key: spec.key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    if spec.kind == FlagKind::List {
        return Ok(Value::Sequence(raw.iter().map(|s| Value::String(s.clone())).collect()));
    }
    let text = raw.last().map(String::as_str).unwrap_or("");
    Ok(match default {
        Some(Value::String(_)) => Value::String(text.to_owned()),
        Some(Value::Bool(_)) => Value::Bool(text.parse().map_err(|_| bad(text, "expected true or false"))?),
        Some(Value::Number(_)) => {
            let parsed: Value = serde_norway::from_str(text).map_err(|_| bad(text, "expected a number"))?;
            if !parsed.is_number() {
                return Err(bad(text, "expected a number"));
            }
            parsed
        }
        _ => serde_norway::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
    })
}

fn lookup<'v>(root: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.').try_fold(root, |v, part| v.as_mapping()?.get(part))
}

fn set(root: &mut Value, key: &str, new: Value) {
    let mut parts = key.split('.').peekable();
    let mut cur = root;
    while let Some(part) = parts.next() {
        if !cur.is_mapping() {
            *cur = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(map) = cur else {
            unreachable!("just made a mapping")
        };
        let k = Value::String(part.to_owned());
        if parts.peek().is_none() {
            map.insert(k, new);
            return;
        }
        cur = map.entry(k).or_insert(Value::Null);
    }
}

/// Markdown reference of every flag: flag, YAML key, default, help. Generated, never written by hand.
pub fn render_reference<T: Serialize + Default>(specs: &[FlagSpec]) -> String {
    let defaults = serde_norway::to_value(T::default()).unwrap_or(Value::Null);
    let mut out = String::from("| flag | YAML key | default | description |\n|---|---|---|---|\n");
    out.push_str("| `--config.file` | | | YAML configuration file; flags override its values |\n");
    out.push_str("| `--print-config` | | | Print the effective configuration as YAML and exit |\n");
    for spec in specs {
        let default = lookup(&defaults, spec.key).map(render_value).unwrap_or_default();
        let default = if default.is_empty() {
            String::new()
        } else {
            format!("`{default}`")
        };
        out.push_str(&format!(
            "| `--{}` | `{}` | {} | {} |\n",
            spec.flag, spec.key, default, spec.help
        ));
    }
    out
}

/// Keys of every leaf in `T::default()` that no spec covers, and specs whose key does not exist: for a test
/// in the binary that proves every YAML key has a flag.
pub fn uncovered_keys<T: Serialize + Default>(specs: &[FlagSpec]) -> (Vec<String>, Vec<&'static str>) {
    let defaults = serde_norway::to_value(T::default()).unwrap_or(Value::Null);
    let mut leaves = Vec::new();
    collect_leaves(&defaults, String::new(), &mut leaves);
    let missing = leaves
        .into_iter()
        .filter(|k| !specs.iter().any(|s| s.key == k))
        .collect();
    let dangling = specs
        .iter()
        .filter(|s| lookup(&defaults, s.key).is_none())
        .map(|s| s.key)
        .collect();
    (missing, dangling)
}

fn collect_leaves(v: &Value, prefix: String, out: &mut Vec<String>) {
    match v {
        Value::Mapping(map) if !map.is_empty() => {
            for (k, child) in map {
                let k = k.as_str().unwrap_or_default();
                let path = if prefix.is_empty() {
                    k.to_owned()
                } else {
                    format!("{prefix}.{k}")
                };
                collect_leaves(child, path, out);
            }
        }
        _ => out.push(prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Server {
        http_listen_address: String,
        http_listen_port: u16,
    }
    impl Default for Server {
        fn default() -> Self {
            Self {
                http_listen_address: String::new(),
                http_listen_port: 8080,
            }
        }
    }
    #[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Root {
        multitenancy_enabled: bool,
        server: Server,
        join: Vec<String>,
    }
    const SPECS: &[FlagSpec] = &[
        FlagSpec {
            flag: "auth.multitenancy-enabled",
            key: "multitenancy_enabled",
            kind: FlagKind::Bool,
            help: "h",
        },
        FlagSpec {
            flag: "server.http-listen-address",
            key: "server.http_listen_address",
            kind: FlagKind::Value,
            help: "h",
        },
        FlagSpec {
            flag: "server.http-listen-port",
            key: "server.http_listen_port",
            kind: FlagKind::Value,
            help: "h",
        },
        FlagSpec {
            flag: "memberlist.join",
            key: "join",
            kind: FlagKind::List,
            help: "h",
        },
    ];

    fn args(a: &[&str]) -> Vec<String> {
        std::iter::once("heddle")
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    }

    #[test]
    fn defaults_file_then_flags() {
        let (c, src) = load::<Root>("t", "t", SPECS, args(&[])).unwrap();
        assert_eq!(c, Root::default());
        assert_eq!(src, ConfigSource::Defaults);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(
            &file,
            "server:\n  http_listen_port: 9000\n  http_listen_address: 10.0.0.1\n",
        )
        .unwrap();
        let f = format!("--config.file={}", file.display());
        let (c, _) = load::<Root>("t", "t", SPECS, args(&[&f, "--server.http-listen-port=7000"])).unwrap();
        assert_eq!(c.server.http_listen_port, 7000, "flag overrides file");
        assert_eq!(c.server.http_listen_address, "10.0.0.1", "file overrides default");

        let (c, _) = load::<Root>(
            "t",
            "t",
            SPECS,
            args(&[
                "--auth.multitenancy-enabled",
                "--server.http-listen-address=123",
                "--memberlist.join=a",
                "--memberlist.join=b",
            ]),
        )
        .unwrap();
        assert!(c.multitenancy_enabled);
        assert_eq!(
            c.server.http_listen_address, "123",
            "numeric-looking text stays a string"
        );
        assert_eq!(c.join, vec!["a", "b"]);
    }

    #[test]
    fn print_config_shows_the_effective_config_as_loadable_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "server:\n  http_listen_address: 10.0.0.1\n").unwrap();
        let f = format!("--config.file={}", file.display());
        for flag in ["--print-config", "--print.config"] {
            let err = load::<Root>("t", "t", SPECS, args(&[&f, "--server.http-listen-port=7000", flag])).unwrap_err();
            let LoadError::PrintConfig { yaml } = err else {
                panic!("{flag}: {err:?}")
            };
            let printed: Root = serde_norway::from_str(&yaml).unwrap();
            assert_eq!(printed.server.http_listen_port, 7000, "{yaml}");
            assert_eq!(printed.server.http_listen_address, "10.0.0.1", "{yaml}");
            assert!(!printed.multitenancy_enabled, "defaults are printed too: {yaml}");
            assert!(yaml.contains("multitenancy_enabled: false"), "{yaml}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let err = load::<Root>("t", "t", SPECS, args(&["--server.http-listen-port=abc"])).unwrap_err();
        assert!(err.to_string().contains("server.http_listen_port"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "server:\n  http_listen_prot: 9000\n").unwrap();
        let f = format!("--config.file={}", file.display());
        let err = load::<Root>("t", "t", SPECS, args(&[&f])).unwrap_err();
        assert!(err.to_string().contains("http_listen_prot"), "{err}");
        assert!(load::<Root>("t", "t", SPECS, args(&["--nope=1"])).is_err());
    }

    #[test]
    fn coverage_check_and_reference() {
        let (missing, dangling) = uncovered_keys::<Root>(SPECS);
        assert!(missing.is_empty() && dangling.is_empty(), "{missing:?} {dangling:?}");
        let (missing, _) = uncovered_keys::<Root>(&SPECS[..1]);
        assert!(missing.contains(&"server.http_listen_port".to_owned()));
        let doc = render_reference::<Root>(SPECS);
        assert!(
            doc.contains("| `--server.http-listen-port` | `server.http_listen_port` | `8080` |"),
            "{doc}"
        );
    }
}
