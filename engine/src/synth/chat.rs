//! A random checkpoint's `tokenizer_config.json`: the chat format its family's instruct releases use,
//! written as a short Jinja template of our own (the published templates add tool calls and dates a
//! random model has no use for), with the begin- and end-of-sequence tokens the template names.
//! `docqa serve --model` builds its prompts from it as from any model's.

use std::path::Path;

use serde_json::json;

use super::shape::Shape;
use crate::error::{EngineError, Result};

/// Llama 3's headers: `<|start_header_id|>role<|end_header_id|>` then the text and `<|eot_id|>`.
const LLAMA3: &str = "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}\
<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}\
<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

/// ChatML (Qwen2, SmolLM2): `<|im_start|>role\n` then the text and `<|im_end|>`.
const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n\
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Mistral's instructions: `[INST] text [/INST]`, a system message taken as one more instruction.
const INST: &str = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}\
{{ m['content'] }}{{ eos_token }}{% else %}[INST] {{ m['content'] }} [/INST]{% endif %}{% endfor %}";

/// The chat template, begin- and end-of-sequence tokens of `shape`, told apart by its special tokens.
pub fn chat_format(shape: &Shape) -> (&'static str, Option<&'static str>, &'static str) {
    let has = |t: &str| shape.special_tokens.iter().any(|(_, s)| *s == t);
    if has("<|start_header_id|>") {
        (LLAMA3, Some("<|begin_of_text|>"), "<|eot_id|>")
    } else if has("<|im_start|>") {
        (CHATML, None, "<|im_end|>")
    } else {
        (INST, Some("<s>"), "</s>")
    }
}

/// Writes `tokenizer_config.json` for `shape` at `path`.
pub fn write_tokenizer_config(shape: &Shape, path: &Path) -> Result<()> {
    let (template, bos, eos) = chat_format(shape);
    let config = json!({
        "chat_template": template,
        "bos_token": bos,
        "eos_token": eos,
    });
    let text = serde_json::to_string_pretty(&config).map_err(|e| EngineError::json(path, e))?;
    std::fs::write(path, text).map_err(|e| EngineError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::named::{LLAMA_3_1_8B, MISTRAL_7B, QWEN_2_5_7B};
    use crate::text::{ChatMessage, TextTokenizer};

    fn rendered(shape: &Shape) -> String {
        let dir = tempfile::tempdir().unwrap();
        crate::synth::tokenizer::write_tokenizer(shape, &dir.path().join("tokenizer.json"))
            .unwrap();
        write_tokenizer_config(shape, &dir.path().join("tokenizer_config.json")).unwrap();
        let tokenizer = TextTokenizer::from_model_dir(dir.path()).unwrap();
        let messages = [
            ChatMessage::new("system", "Answer from the sources."),
            ChatMessage::new("user", "When does the lease end? "),
        ];
        tokenizer.apply_chat_template(&messages, true).unwrap()
    }

    #[test]
    fn each_family_renders_its_instruct_format_ready_for_the_answer() {
        assert_eq!(
            rendered(&LLAMA_3_1_8B),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nAnswer from the \
             sources.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhen does the lease \
             end?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(
            rendered(&QWEN_2_5_7B),
            "<|im_start|>system\nAnswer from the sources.<|im_end|>\n<|im_start|>user\nWhen does \
             the lease end? <|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            rendered(&MISTRAL_7B),
            "<s>[INST] Answer from the sources. [/INST][INST] When does the lease end?  [/INST]"
        );
    }
}
