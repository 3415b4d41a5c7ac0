//! The names PEFT saves LoRA tensors under, `base_model.model.<module path>.lora_A.weight` (and
//! `lora_B`): which base projection each adapts, and the problem any other tensor shows (DoRA's
//! magnitude vectors, embedding LoRA, saved modules, biases).

use super::{AdapterProblem, SUPPORTED_MODULES};

/// PEFT's prefix of every saved LoRA tensor.
const KEY_PREFIX: &str = "base_model.model.";

/// Which half of a LoRA pair a tensor is.
#[derive(Debug, PartialEq)]
pub(super) enum Half {
    /// `lora_A`, `[r, in]`.
    A,
    /// `lora_B`, `[out, r]`.
    B,
}

/// The base tensor a saved LoRA tensor adapts, and which half it is.
pub(super) fn parse_key(key: &str) -> Result<(String, Half), AdapterProblem> {
    let unexpected = || AdapterProblem::UnexpectedTensor(key.to_owned());
    let rest = key.strip_prefix(KEY_PREFIX).ok_or_else(unexpected)?;
    let (module_path, half) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
        (m, Half::A)
    } else if let Some(m) = rest.strip_suffix(".lora_B.weight") {
        (m, Half::B)
    } else {
        return Err(classify_other(key));
    };
    let module = module_path.rsplit('.').next().unwrap_or(module_path);
    if !SUPPORTED_MODULES.contains(&module) {
        return Err(AdapterProblem::UnsupportedTarget(module.to_owned()));
    }
    Ok((format!("{module_path}.weight"), half))
}

/// The problem a saved tensor other than a projection's LoRA A/B shows.
fn classify_other(key: &str) -> AdapterProblem {
    if key.contains("lora_magnitude_vector") {
        AdapterProblem::Dora
    } else if key.contains("lora_embedding_") {
        AdapterProblem::UnsupportedTarget("embed_tokens".into())
    } else if key.contains("modules_to_save") {
        AdapterProblem::ModulesToSave(key.to_owned())
    } else if key.ends_with(".bias") {
        AdapterProblem::Bias(key.to_owned())
    } else {
        AdapterProblem::UnexpectedTensor(key.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_base_projection_and_other_modules_are_refused() {
        let (base, half) =
            parse_key("base_model.model.model.layers.3.mlp.down_proj.lora_B.weight").unwrap();
        assert_eq!(base, "model.layers.3.mlp.down_proj.weight");
        assert_eq!(half, Half::B);
        let refused = [
            ("base_model.model.lm_head.lora_A.weight", "lm_head"),
            (
                "base_model.model.model.embed_tokens.lora_embedding_A",
                "embed_tokens",
            ),
        ];
        for (key, module) in refused {
            assert_eq!(
                parse_key(key).unwrap_err(),
                AdapterProblem::UnsupportedTarget(module.into())
            );
        }
        assert_eq!(
            parse_key("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector")
                .unwrap_err(),
            AdapterProblem::Dora
        );
    }
}
