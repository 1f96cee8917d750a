//! SIGHUP: which changed keys the running daemon applies and which need a restart.

use super::{Config, ConfigError};

/// The keys SIGHUP applies to the running daemon. Every other changed
/// key is named as needing a restart. Whatever is listed here, [`Config::apply_reloadable`]
/// must copy.
pub const RELOADABLE: &[&str] = &["log_level", "exports"];

/// What a SIGHUP's new configuration changes, key by key (TOML names).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Reloadable keys that changed: `(key, old value, new value)`.
    pub apply: Vec<(String, String, String)>,
    /// Changed keys that take effect only after a restart.
    pub restart: Vec<String>,
}

/// Compares the running configuration with a newly loaded one. Keys are enumerated through
/// `Serialize`, so a key added to [`Config`] is never silently ignored by a reload.
pub fn reload_plan(running: &Config, new: &Config) -> Result<ReloadPlan, ConfigError> {
    let table = |c: &Config| match toml::Value::try_from(c) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(_) => Err(ConfigError::Invalid("configuration is not a table".into())),
        Err(e) => Err(ConfigError::Invalid(format!(
            "cannot compare configurations: {e}"
        ))),
    };
    let (a, b) = (table(running)?, table(new)?);
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let show = |v: Option<&toml::Value>| v.map_or("unset".to_string(), |v| v.to_string());
    let mut plan = ReloadPlan::default();
    for k in keys {
        let (old, new) = (a.get(k), b.get(k));
        if old == new {
            continue;
        }
        if RELOADABLE.contains(&k.as_str()) {
            plan.apply.push((k.clone(), show(old), show(new)));
        } else {
            plan.restart.push(k.clone());
        }
    }
    Ok(plan)
}
