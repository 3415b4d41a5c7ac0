//! `adapter_config.json` of a PEFT LoRA adapter: the fields the merge needs (`r`, `lora_alpha`,
//! `use_rslora`, `target_modules`) and every PEFT feature that would make `W + scale · B·A` wrong, each
//! refused with its own [`AdapterProblem`]. Fields that only matter for training (`lora_dropout`,
//! `init_lora_weights`, `task_type`, ...) are ignored.

use serde::Deserialize;
use serde_json::Value;

use super::AdapterProblem;

/// The projections a LoRA may adapt: a Llama layer's linear maps (PEFT's module names).
pub const SUPPORTED_MODULES: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// `target_modules`: a list of module names, or one string (`all-linear`, or a regular expression).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TargetModules {
    /// Module names.
    List(Vec<String>),
    /// `all-linear` or a regular expression over module paths.
    Pattern(String),
}

/// The parsed `adapter_config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct AdapterConfig {
    /// `LORA` for a LoRA adapter (absent in hand-written configs).
    pub peft_type: Option<String>,
    /// The rank.
    pub r: usize,
    /// The scale's numerator.
    pub lora_alpha: f64,
    /// Rank-stabilised scaling: alpha / √r instead of alpha / r.
    #[serde(default)]
    pub use_rslora: bool,
    /// The adapted modules.
    pub target_modules: TargetModules,
    /// The model the adapter was trained on (reported, not enforced: shapes are).
    pub base_model_name_or_path: Option<String>,
    #[serde(default)]
    fan_in_fan_out: bool,
    bias: Option<String>,
    #[serde(default)]
    use_dora: bool,
    modules_to_save: Option<Vec<String>>,
    rank_pattern: Option<Value>,
    alpha_pattern: Option<Value>,
    lora_bias: Option<bool>,
    layer_replication: Option<Value>,
    trainable_token_indices: Option<Value>,
    target_parameters: Option<Value>,
    alora_invocation_tokens: Option<Value>,
    arrow_config: Option<Value>,
    use_qalora: Option<Value>,
    use_bdlora: Option<Value>,
    kasa_config: Option<Value>,
    monteclora_config: Option<Value>,
}

impl AdapterConfig {
    /// Parses the JSON text and refuses what cannot be merged as `W + scale · B·A` on the projections.
    pub fn parse(text: &str) -> Result<Self, AdapterProblem> {
        let config: Self =
            serde_json::from_str(text).map_err(|e| AdapterProblem::Config(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// `lora_alpha / r`, or `lora_alpha / √r` with `use_rslora`.
    pub fn scale(&self) -> f32 {
        let r = self.r as f64;
        let divisor = if self.use_rslora { r.sqrt() } else { r };
        (self.lora_alpha / divisor) as f32
    }

    fn validate(&self) -> Result<(), AdapterProblem> {
        if let Some(kind) = self.peft_type.as_deref().filter(|k| *k != "LORA") {
            return Err(AdapterProblem::NotLora(kind.into()));
        }
        if self.r == 0 {
            return Err(AdapterProblem::Config("r must be at least 1".into()));
        }
        if self.use_dora {
            return Err(AdapterProblem::Dora);
        }
        if self.fan_in_fan_out {
            return Err(AdapterProblem::FanInFanOut);
        }
        if let Some(bias) = self.bias.as_deref().filter(|b| *b != "none") {
            return Err(AdapterProblem::Bias(bias.into()));
        }
        if let Some(modules) = self.modules_to_save.as_ref().filter(|m| !m.is_empty()) {
            return Err(AdapterProblem::ModulesToSave(modules.join(", ")));
        }
        self.refuse_features()?;
        self.check_targets()
    }

    /// PEFT options that change the merge per module, touch other weights, or change LoRA's forward
    /// (activated LoRA, routing, QA-LoRA's pooling, ...); options that only shape training or the
    /// initialisation (`loftq_config`, `eva_config`, `corda_config`, ...) do not matter once trained.
    fn refuse_features(&self) -> Result<(), AdapterProblem> {
        let set = |v: &Option<Value>| match v {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Object(m)) => !m.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        let features = [
            ("rank_pattern", set(&self.rank_pattern)),
            ("alpha_pattern", set(&self.alpha_pattern)),
            ("lora_bias", self.lora_bias == Some(true)),
            ("layer_replication", set(&self.layer_replication)),
            (
                "trainable_token_indices",
                set(&self.trainable_token_indices),
            ),
            ("target_parameters", set(&self.target_parameters)),
            (
                "alora_invocation_tokens",
                set(&self.alora_invocation_tokens),
            ),
            ("arrow_config", set(&self.arrow_config)),
            ("use_qalora", set(&self.use_qalora)),
            ("use_bdlora", set(&self.use_bdlora)),
            ("kasa_config", set(&self.kasa_config)),
            ("monteclora_config", set(&self.monteclora_config)),
        ];
        match features.into_iter().find(|(_, on)| *on) {
            Some((name, _)) => Err(AdapterProblem::Feature(name)),
            None => Ok(()),
        }
    }

    /// Listed modules must be projections; of the patterns only `all-linear` (which, on a Llama, is
    /// exactly the projections) is understood.
    fn check_targets(&self) -> Result<(), AdapterProblem> {
        match &self.target_modules {
            TargetModules::List(names) => match names
                .iter()
                .find(|n| !SUPPORTED_MODULES.contains(&n.as_str()))
            {
                Some(name) => Err(AdapterProblem::UnsupportedTarget(name.clone())),
                None => Ok(()),
            },
            TargetModules::Pattern(p) if p == "all-linear" => Ok(()),
            TargetModules::Pattern(p) => Err(AdapterProblem::UnsupportedTarget(p.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(extra: &str) -> Result<AdapterConfig, AdapterProblem> {
        AdapterConfig::parse(&format!(
            r#"{{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
                "bias": "none", "modules_to_save": null, "alpha_pattern": {{}}, "lora_dropout": 0.05{extra}}}"#
        ))
    }

    #[test]
    fn the_scale_is_alpha_over_r_or_over_its_root_with_rslora() {
        assert_eq!(with("").unwrap().scale(), 2.0);
        assert_eq!(
            with(r#", "use_rslora": true"#).unwrap().scale(),
            16.0 / 8f32.sqrt()
        );
    }

    #[test]
    fn features_that_change_the_merge_are_refused_by_name() {
        let cases = [
            (r#", "use_dora": true"#, AdapterProblem::Dora),
            (r#", "fan_in_fan_out": true"#, AdapterProblem::FanInFanOut),
            (
                r#", "rank_pattern": {"q_proj": 4}"#,
                AdapterProblem::Feature("rank_pattern"),
            ),
            (
                r#", "lora_bias": true"#,
                AdapterProblem::Feature("lora_bias"),
            ),
        ];
        for (extra, problem) in cases {
            assert_eq!(with(extra).unwrap_err(), problem, "{extra}");
        }
    }

    #[test]
    fn bias_modules_to_save_and_other_targets_are_refused() {
        let text = |bias: &str, save: &str, targets: &str| {
            format!(
                r#"{{"r": 4, "lora_alpha": 8, "bias": "{bias}", "modules_to_save": {save}, "target_modules": {targets}}}"#
            )
        };
        let parse = |t: String| AdapterConfig::parse(&t).unwrap_err();
        assert_eq!(
            parse(text("all", "null", r#"["q_proj"]"#)),
            AdapterProblem::Bias("all".into())
        );
        assert_eq!(
            parse(text("none", r#"["lm_head"]"#, r#"["q_proj"]"#)),
            AdapterProblem::ModulesToSave("lm_head".into())
        );
        assert_eq!(
            parse(text("none", "null", r#"["q_proj", "embed_tokens"]"#)),
            AdapterProblem::UnsupportedTarget("embed_tokens".into())
        );
        assert_eq!(
            parse(text("none", "null", r#"".*attn.*""#)),
            AdapterProblem::UnsupportedTarget(".*attn.*".into())
        );
        assert!(AdapterConfig::parse(&text("none", "[]", r#""all-linear""#)).is_ok());
    }
}
