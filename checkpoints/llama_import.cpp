// `ptdp ckpt import-safetensors` for the LLaMA family: a Hugging Face
// LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM (config.json and
// one safetensors file or the shards of model.safetensors.index.json) becomes
// a ptdp checkpoint at iteration 0 through llama_layout's mapping.
#include "checkpoints/llama_import.h"

#include <algorithm>
#include <filesystem>
#include <new>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoints/hdf5_file.h"
#include "checkpoints/llama_layout.h"
#include "checkpoints/safetensors_file.h"
#include "engine/data/tokenizer.h"
#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/core/text.h"

namespace ptdp {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char *kFamily = "llama, mistral, qwen2";

json parse_config(const std::string &text, const std::string &where) {
  const json c = parse_json_text(text, where);
  if (!c.is_object()) fail(Status::corrupt_data, where, " is not a JSON object (a model config)");
  return c;
}

const json *get(const json &c, const char *key) {
  auto it = c.find(key);
  return it == c.end() || it->is_null() ? nullptr : &*it;
}

int count(const json &c, const char *key, const std::string &where, int fallback = 0) {
  const json *v = get(c, key);
  if (!v) {
    if (fallback > 0) return fallback;
    fail(Status::invalid_config, where, ": field '", key, "' is missing");
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > (1 << 24))
    fail(Status::invalid_config, where, ": '", key, "' must be an integer in [1, ", 1 << 24, "], got ",
         v->dump());
  return (int)v->get<int64_t>();
}

double number(const json &c, const char *key, const std::string &where, double fallback) {
  const json *v = get(c, key);
  if (!v) return fallback;
  if (!v->is_number())
    fail(Status::invalid_config, where, ": '", key, "' must be a number, got ", v->dump());
  return v->get<double>();
}

bool flag(const json &c, const char *key, const std::string &where, bool fallback) {
  const json *v = get(c, key);
  if (!v) return fallback;
  if (!v->is_boolean())
    fail(Status::invalid_config, where, ": '", key, "' must be true or false, got ", v->dump());
  return v->get<bool>();
}

// A field that changes the function and that ptdp does not compute: refused
// by name, never ignored.
[[noreturn]] void unsupported(const std::string &where, const std::string &what,
                              const std::string &why) {
  fail(Status::invalid_config, where, ": ", what, " is not supported (", why, ")");
}

// rope_theta from the config (transformers <= 4: rope_theta and rope_scaling;
// 5: rope_parameters {rope_theta, rope_type}); only unscaled rope.
double rope_theta(const json &c, const std::string &where) {
  double theta = number(c, "rope_theta", where, 10000.0);
  for (const char *key : {"rope_scaling", "rope_parameters"}) {
    const json *r = get(c, key);
    if (!r) continue;
    if (!r->is_object()) fail(Status::invalid_config, where, ": '", key, "' is not an object");
    // rope_type, else the older "type" (transformers reads them in that order).
    std::string type = "default";
    for (const char *k : {"type", "rope_type"}) {
      if (!r->contains(k) || (*r)[k].is_null()) continue;
      if (!(*r)[k].is_string())
        fail(Status::invalid_config, where, ": ", key, ".", k, " must be a string, got ",
             json_excerpt((*r)[k]));
      type = (*r)[k].get<std::string>();
    }
    if (type != "default")
      unsupported(where, std::string(key) + " of type \"" + type + "\"",
                  "ptdp's rotary embedding is unscaled: rope_type \"default\" only");
    theta = number(*r, "rope_theta", where, theta);
  }
  return theta;
}

// The tensors of one safetensors file or of the shards an index lists.
class HfWeights {
 public:
  explicit HfWeights(const std::string &path) {
    if (!ends_with(path, ".index.json")) {
      add_file(path);
      return;
    }
    const json index = parse_config(read_text(path), "index '" + path + "'");
    const json *map = get(index, "weight_map");
    if (!map || !map->is_object())
      fail(Status::corrupt_data, "index '", path, "' has no weight_map object");
    const fs::path dir = fs::path(path).parent_path();
    std::map<std::string, std::string> listed;  // tensor -> shard file
    for (auto it = map->begin(); it != map->end(); ++it) {
      const std::string shard = it->is_string() ? it->get<std::string>() : "";
      // A shard lies beside its index: a path elsewhere would read another file.
      if (shard.empty() || shard == "." || shard == ".." ||
          shard.find_first_of(std::string("/\0", 2)) != std::string::npos)
        fail(Status::corrupt_data, "index '", path, "' maps '", it.key(), "' to ", it->dump(),
             ": not a file name beside the index");
      listed[it.key()] = (dir / shard).string();
    }
    std::set<std::string> shards;
    for (const auto &[name, file] : listed) shards.insert(file);
    for (const std::string &file : shards) {
      std::error_code ec;
      if (!fs::exists(file, ec))
        fail(Status::io_error, "shard '", file, "' listed in '", path, "' is missing");
      add_file(file);
    }
    for (const auto &[name, file] : listed)
      if (!tensors_.count(name) || tensors_[name].first != file)
        fail(Status::corrupt_data, "index '", path, "' puts '", name, "' in '", file,
             "', which does not hold it");
    for (const auto &[name, at] : tensors_)
      if (!listed.count(name))
        fail(Status::corrupt_data, "shard '", at.first, "' holds '", name, "', which index '", path,
             "' does not list");
  }
  // The tensor and its file; null when no file holds it.
  const std::pair<std::string, SourceTensor> *find(const std::string &name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, std::pair<std::string, SourceTensor>> &all() const { return tensors_; }
  // The metadata of its (first) file: a ptdp export's record of its tokenizer.
  const nlohmann::json &metadata() const { return metadata_; }

 private:
  void add_file(const std::string &file) {
    maps_.push_back(std::make_unique<MappedFile>(file, "'" + file + "'"));
    const MappedFile &m = *maps_.back();
    const Safetensors st = parse_safetensors(file, m.data(), m.size());
    if (maps_.size() == 1) metadata_ = st.metadata;
    for (const auto &[name, t] : st.tensors) {
      if (tensors_.count(name))
        fail(Status::corrupt_data, "'", name, "' is in both '", tensors_[name].first, "' and '",
             file, "'");
      tensors_[name] = {file, t};
    }
  }
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::map<std::string, std::pair<std::string, SourceTensor>> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

// Not parameters: old files' rotary tables (model.layers.N.self_attn.rotary_emb.inv_freq).
bool is_buffer(const std::string &name) { return ends_with(name, ".rotary_emb.inv_freq"); }

}  // namespace

bool is_llama_family(const std::string &config_text) {
  try {
    const json c = parse_json_or_discard(config_text);
    if (!c.is_object() || !c.contains("model_type") || !c["model_type"].is_string()) return false;
    const std::string t = c["model_type"].get<std::string>();
    return t == "llama" || t == "mistral" || t == "qwen2";
  } catch (const json::exception &) {
    return false;
  }
}

GptConfig gpt_config_from_llama(const std::string &text, const std::string &where) {
  const json c = parse_config(text, where);
  const std::string type = c.contains("model_type") && c["model_type"].is_string()
                               ? c["model_type"].get<std::string>()
                               : "";
  if (type != "llama" && type != "mistral" && type != "qwen2")
    fail(Status::invalid_config, where, ": model_type ",
         !c.contains("model_type") ? std::string("is missing")
                                   : "is " + json_excerpt(c["model_type"]),
         " (allowed: ", kFamily, ")");
  GptConfig g;
  g.normalization = GptConfig::RMSNorm;
  g.position_embedding_type = GptConfig::Rope;
  g.swiglu = 1;
  g.disable_bias_linear = 1;
  g.hidden_size = count(c, "hidden_size", where);
  g.num_layers = count(c, "num_hidden_layers", where);
  if (g.num_layers > 4096)
    fail(Status::invalid_config, where, ": num_hidden_layers is ", g.num_layers,
         "; ptdp takes at most 4096");
  g.num_attention_heads = count(c, "num_attention_heads", where);
  g.num_query_groups = count(c, "num_key_value_heads", where, g.num_attention_heads);
  if (g.num_query_groups == g.num_attention_heads) g.num_query_groups = 0;
  g.ffn_hidden_size = count(c, "intermediate_size", where);
  g.vocab_size = count(c, "vocab_size", where);
  g.max_position_embeddings = count(c, "max_position_embeddings", where);
  g.seq_length = g.max_position_embeddings;
  g.layernorm_epsilon = (float)number(c, "rms_norm_eps", where, 1e-6);
  g.rotary_base = (float)rope_theta(c, where);
  g.untie_embeddings_and_output_weights = !flag(c, "tie_word_embeddings", where, false);
  g.hidden_dropout = 0.f;  // the LLaMA family has no residual dropout
  g.attention_dropout = (float)number(c, "attention_dropout", where, 0.0);
  g.init_method_std = (float)number(c, "initializer_range", where, 0.02);
  if (const json *act = get(c, "hidden_act"); act && *act != "silu")
    unsupported(where, "hidden_act " + act->dump(), "ptdp's SwiGLU gates with silu");
  // Linear biases. Qwen2 has q, k, v biases always (add_qkv_bias) and none in
  // its MLP; LLaMA's attention_bias puts one on q, k, v and o_proj, its
  // mlp_bias on gate, up and down: both together are ptdp's linear biases
  // (disable_bias_linear 0); one without the other has no ptdp form.
  const bool attention_bias = flag(c, "attention_bias", where, false),
             mlp_bias = flag(c, "mlp_bias", where, false);
  if (type == "qwen2") {
    g.add_qkv_bias = 1;
    if (mlp_bias) unsupported(where, "mlp_bias true", "Qwen2's MLP has no biases");
  } else if (attention_bias || mlp_bias) {
    const std::string what = attention_bias ? "attention_bias true" : "mlp_bias true";
    if (type != "llama")
      unsupported(where, what, "only model_type llama has linear biases");
    if (attention_bias != mlp_bias)
      unsupported(where, what + " without " + (attention_bias ? "mlp_bias" : "attention_bias"),
                  "ptdp's linear biases are all there (both true) or only q, k and v's (Qwen2)");
    g.disable_bias_linear = 0;
  }
  // (Heads that do not divide the width are that model's first fault: said
  // so by the model's own check, not as a head_dim "hidden_size / heads" that
  // would be a truncated quotient.)
  if (g.hidden_size % g.num_attention_heads != 0)
    fail(Status::invalid_config, where, ": num_attention_heads (", g.num_attention_heads,
         ") must divide hidden_size (", g.hidden_size, ")");
  if (const json *hd = get(c, "head_dim");
      hd && (!hd->is_number_integer() || hd->get<int64_t>() != g.hidden_size / g.num_attention_heads))
    unsupported(where, "head_dim " + hd->dump(),
                "ptdp's head dim is hidden_size / num_attention_heads = " +
                    std::to_string(g.hidden_size / g.num_attention_heads));
  // Sliding-window attention: Mistral's sliding_window, Qwen2's use_sliding_window.
  const bool sliding = type == "qwen2" ? flag(c, "use_sliding_window", where, false)
                                       : get(c, "sliding_window") &&
                                             number(c, "sliding_window", where, 0) <
                                                 g.max_position_embeddings;
  if (sliding)
    unsupported(where, "sliding-window attention", "ptdp's attention sees every earlier token");
  if (const json *types = get(c, "layer_types"); types && !types->is_array())
    fail(Status::invalid_config, where, ": 'layer_types' must be a list, got ", types->dump());
  if (const json *types = get(c, "layer_types")) {
    for (const json &t : *types)
      if (t != "full_attention")
        unsupported(where, "layer_types " + json_excerpt(t), "ptdp's layers are full attention");
    if ((int64_t)types->size() != g.num_layers)
      fail(Status::invalid_config, where, ": 'layer_types' lists ", types->size(), " layers, but ",
           "num_hidden_layers is ", g.num_layers);
  }
  // Rotary embeddings on part of each head (transformers' partial_rotary_factor).
  if (const json *f = get(c, "partial_rotary_factor"); f && !(f->is_number() && f->get<double>() == 1.0))
    unsupported(where, "partial_rotary_factor " + f->dump(), "ptdp rotates the whole of each head");
  try {
    g.validate(1);
  } catch (const Error &e) {
    fail(Status::invalid_config, where, ": ", e.what());
  }
  return g;
}

std::string import_llama(const std::string &weights, const std::string &config_text,
                         const std::string &where, const std::string &dir) {
  const GptConfig cfg = gpt_config_from_llama(config_text, where);
  const HfWeights w(weights);
  const std::vector<ParamInfo> table = gpt_param_table(cfg, 1, {});
  // Every tensor of the files must have its place (or be a buffer).
  std::set<std::string> expected;
  std::vector<HfMapping> maps;
  for (const ParamInfo &p : table) {
    maps.push_back(llama_mapping(p, cfg));
    for (const HfTensor &t : maps.back().sources) expected.insert(t.name);
  }
  for (const auto &[name, at] : w.all())
    if (!expected.count(name) && !is_buffer(name) && !(cfg.tied() && name == "lm_head.weight"))
      fail(Status::invalid_config, "tensor '", name, "' in '", at.first, "' is not a parameter of ",
           "the ", cfg.num_layers, "-layer model ", where, " describes",
           cfg.tied() ? "" : " (untied: lm_head.weight is one)");

  // Every tensor's presence, shape and dtype from the headers before any
  // memory is taken (a config that does not fit the weights says so).
  for (const HfMapping &m : maps)
    for (const HfTensor &t : m.sources) {
      const auto *at = w.find(t.name);
      if (!at)
        fail(Status::invalid_config, "tensor '", t.name, "' is missing from '", weights, "' (", where,
             t.name == "lm_head.weight"
                 ? std::string(" unties the output layer from the embedding, tie_word_embeddings being "
                               "false or absent; a model whose output layer is its embedding says "
                               "tie_word_embeddings true")
                 : " makes a model of " + std::to_string(cfg.num_layers) + " layers",
             ")");
      if (at->second.shape != t.shape)
        fail(Status::invalid_config, "tensor '", t.name, "' in '", at->first, "' is ",
             dims_text(at->second.shape), " but ", where, " makes it ", dims_text(t.shape));
      check_dtype(at->first, t.name, at->second);
    }
  size_t total = 0;
  for (const ParamInfo &p : table) total = std::max(total, p.offset + p.numel);
  std::vector<float> params;
  try {
    params.assign(total, 0.f);
  } catch (const std::bad_alloc &) {
    fail(Status::out_of_memory, "importing ", where, "'s model needs ", total * 4 * 2 / 1e9,
         " GB of host memory (its parameters in fp32 and Adam's zero moments)");
  }
  for (size_t k = 0; k < table.size(); k++) {
    const ParamInfo &p = table[k];
    const HfMapping &m = maps[k];
    std::vector<std::vector<float>> src;  // each Hugging Face tensor feeds one parameter
    for (const HfTensor &t : m.sources) {
      const auto *at = w.find(t.name);
      src.push_back(widen(at->first, t.name, at->second));
    }
    for (int64_t r = 0; r < m.rows; r++) {
      const auto [s, row] = m.row(r);
      std::copy_n(src[(size_t)s].begin() + row * m.cols, m.cols, params.begin() + p.offset + r * m.cols);
    }
  }
  // A tied model's file may hold lm_head too: it must be the embedding.
  if (const auto *head = w.find("lm_head.weight"); head && cfg.tied()) {
    const auto *emb = w.find("model.embed_tokens.weight");
    if (head->second.shape != emb->second.shape ||
        widen(head->first, "lm_head.weight", head->second) !=
            widen(emb->first, "model.embed_tokens.weight", emb->second))
      fail(Status::invalid_config, "'lm_head.weight' in '", head->first,
           "' differs from model.embed_tokens.weight, but ", where,
           " says tie_word_embeddings: the model would not be the one in the file");
  }
  std::map<std::string, std::string> training = imported_source(weights);
  // The model's own tokenizer beside it: generating with another (the byte
  // tokenizer, say) would read its ids as other text, and is refused by name.
  std::error_code ec;
  if (fs::is_regular_file(fs::path(weights).parent_path() / "tokenizer.json", ec))
    training[kTokenizerTypeKey] = "HuggingFaceTokenizer";
  record_tokenizer(weights, w.metadata(), training);
  // The tokenizer's ids of bos and eos (an id or a list), for the export's configs.
  const json c = parse_config(config_text, where);
  for (const char *id : {"bos_token_id", "eos_token_id"}) {
    const json *v = get(c, id);
    if (!v) continue;
    bool ids = v->is_number_integer() || (v->is_array() && !v->empty());
    for (const json &e : v->is_array() ? *v : json::array())
      ids = ids && e.is_number_integer();
    if (!ids)
      fail(Status::invalid_config, where, ": '", id, "' must be a token id or a list of them, got ",
           v->dump());
    training[std::string("hf_") + id] = v->dump();
  }
  check_import_target(dir, cfg, training);
  return save_imported(dir, cfg, table, params, training);
}

}  // namespace ptdp
