//! GGUF → HF conversion on the real SmolLM2-135M-Instruct GGUF: tensor names and shapes, the Q/K
//! un-permutation, bf16 values, and the generated configuration files.

use crate::real_model;

use std::collections::BTreeMap;

use docqa_engine::convert::tensors::{hf_name, permute_rows, unpermute_rows};
use docqa_engine::gguf::GgufFile;
use half::bf16;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

const LAYERS: usize = 30;

fn expected_shapes() -> BTreeMap<String, Vec<usize>> {
    let mut shapes = BTreeMap::from([
        ("model.embed_tokens.weight".to_owned(), vec![49152, 576]),
        ("model.norm.weight".to_owned(), vec![576]),
    ]);
    for i in 0..LAYERS {
        for (part, shape) in [
            ("self_attn.q_proj.weight", vec![576, 576]),
            ("self_attn.k_proj.weight", vec![192, 576]),
            ("self_attn.v_proj.weight", vec![192, 576]),
            ("self_attn.o_proj.weight", vec![576, 576]),
            ("mlp.gate_proj.weight", vec![1536, 576]),
            ("mlp.up_proj.weight", vec![1536, 576]),
            ("mlp.down_proj.weight", vec![576, 1536]),
            ("input_layernorm.weight", vec![576]),
            ("post_attention_layernorm.weight", vec![576]),
        ] {
            shapes.insert(format!("model.layers.{i}.{part}"), shape);
        }
    }
    shapes
}

fn bf16_values(st: &SafeTensors<'_>, name: &str) -> Vec<f32> {
    let view = st.tensor(name).unwrap();
    assert_eq!(view.dtype(), Dtype::BF16, "{name}");
    view.data()
        .chunks_exact(2)
        .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

fn round_to_bf16(values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()
}

#[test]
fn every_tensor_has_its_hf_name_and_hf_shape_and_there_is_no_lm_head() {
    let bytes = std::fs::read(real_model::converted_dir().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let actual: BTreeMap<String, Vec<usize>> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.shape().to_vec()))
        .collect();
    assert_eq!(actual, expected_shapes());
}

#[test]
fn applying_the_gguf_permutation_to_the_output_gives_back_the_gguf_rows() {
    let gguf = GgufFile::open(real_model::smollm2_gguf()).unwrap();
    let bytes = std::fs::read(real_model::converted_dir().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    for layer in [0, 17, 29] {
        for (gguf_part, hf_part, heads) in [("attn_q", "q_proj", 9), ("attn_k", "k_proj", 3)] {
            let original = round_to_bf16(
                &gguf
                    .tensor_f32(&format!("blk.{layer}.{gguf_part}.weight"))
                    .unwrap(),
            );
            let converted = bf16_values(
                &st,
                &format!("model.layers.{layer}.self_attn.{hf_part}.weight"),
            );
            assert_ne!(
                converted, original,
                "layer {layer} {hf_part} was not reordered"
            );
            assert_eq!(
                permute_rows(&converted, 576, heads).unwrap(),
                original,
                "layer {layer} {hf_part}"
            );
        }
    }
}

#[test]
fn unpermute_matches_the_reshape_swapaxes_definition_on_a_small_matrix() {
    // Two heads of head_dim 6, one column holding the GGUF row number. llama.cpp's converter computes
    // w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2): GGUF row h*6 + 2j + half holds HF row h*6 + 3*half + j,
    // so HF rows [0..6] of a head sit at GGUF rows [0, 2, 4, 1, 3, 5].
    let gguf_rows: Vec<f32> = (0..12).map(|r| r as f32).collect();
    let hf = unpermute_rows(&gguf_rows, 1, 2).unwrap();
    let expected = [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11].map(|r| r as f32);
    assert_eq!(hf, expected);
    assert_eq!(permute_rows(&hf, 1, 2).unwrap(), gguf_rows);
}

#[test]
fn bf16_values_equal_the_dequantised_values_rounded_to_bf16() {
    let gguf = GgufFile::open(real_model::smollm2_gguf()).unwrap();
    let bytes = std::fs::read(real_model::converted_dir().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    for info in gguf.tensors() {
        let name = hf_name(&info.name).unwrap().unwrap();
        let mut expected = round_to_bf16(&gguf.tensor_f32(&info.name).unwrap());
        let cols = *info.shape().last().unwrap();
        if info.name.ends_with("attn_q.weight") {
            expected = unpermute_rows(&expected, cols, 9).unwrap();
        } else if info.name.ends_with("attn_k.weight") {
            expected = unpermute_rows(&expected, cols, 3).unwrap();
        }
        assert!(bf16_values(&st, &name) == expected, "{name} differs");
    }
}

#[test]
fn config_json_describes_smollm2_135m() {
    let text = std::fs::read_to_string(real_model::converted_dir().join("config.json")).unwrap();
    let config: Value = serde_json::from_str(&text).unwrap();
    let expected = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "head_dim": 64, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0, "rope_scaling": null, "vocab_size": 49152, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "hidden_act": "silu",
    });
    for (key, value) in expected.as_object().unwrap() {
        assert_eq!(&config[key], value, "{key}");
    }
}

#[test]
fn tokenizer_config_and_generation_config_carry_the_chat_template_and_end_ids() {
    let dir = real_model::converted_dir();
    let tc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert!(
        tc["chat_template"]
            .as_str()
            .unwrap()
            .contains("<|im_start|>")
    );
    let gc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generation_config.json")).unwrap())
            .unwrap();
    assert_eq!(gc["eos_token_id"], serde_json::json!([2, 0]));
}
