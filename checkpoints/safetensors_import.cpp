#include "checkpoints/safetensors_import.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "checkpoints/commit.h"
#include "checkpoints/gpt2_layout.h"
#include "checkpoints/hdf5_file.h"
#include "checkpoints/llama_import.h"
#include "checkpoints/safetensors_file.h"
#include "checkpoints/save_target.h"
#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/dtype.h"
#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/output_file.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/model/gpt.h"

namespace ptdp {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ---- the GPT2Config -------------------------------------------------------

const char *kRequired =
    "n_embd, n_layer, n_head, n_positions, vocab_size, layer_norm_epsilon, activation_function, "
    "attn_pdrop, resid_pdrop, embd_pdrop";

const json &field(const json &c, const char *key, const std::string &where) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null())
    fail(Status::invalid_config, where, ": field '", key,
         "' is missing (ptdp needs the GPT2Config fields ", kRequired, ")");
  return *it;
}

int positive_int(const json &c, const char *key, const std::string &where) {
  const json &v = field(c, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > INT_MAX)
    fail(Status::invalid_config, where, ": '", key, "' must be an integer in [1, ", INT_MAX, "], got ",
         json_excerpt(v));
  return (int)v.get<int64_t>();
}

float number(const json &v, const char *key, const std::string &where) {
  if (!v.is_number())
    fail(Status::invalid_config, where, ": '", key, "' must be a number, got ", json_excerpt(v));
  return (float)v.get<double>();
}

float probability(const json &c, const char *key, const std::string &where) {
  const float p = number(field(c, key, where), key, where);
  if (!(p >= 0.f && p < 1.f))
    fail(Status::invalid_config, where, ": '", key, "' must be in [0, 1), got ", p);
  return p;
}

// ---- GPT-2's names and layouts ---------------------------------------------

// Writes GPT-2's values `src` into ptdp's layout at `dst`.
void place(const Gpt2Layout &l, const std::vector<float> &src, int64_t h, int64_t hd, float *dst) {
  for (int64_t r = 0; r < l.rows; r++) {
    const int64_t g = gpt2_row(l, r, h, hd);
    for (int64_t c = 0; c < l.cols; c++)
      dst[r * l.cols + c] =
          l.transpose ? src[(size_t)(c * l.rows + g)] : src[(size_t)(g * l.cols + c)];
  }
}

// The registered buffers of old GPT-2 files, not parameters: h.N.attn.bias
// (the causal mask) and h.N.attn.masked_bias.
bool is_buffer(const std::string &name) {
  if (name.rfind("h.", 0) != 0) return false;
  size_t i = 2;
  while (i < name.size() && std::isdigit((unsigned char)name[i])) i++;
  const std::string rest = name.substr(i);
  return i > 2 && (rest == ".attn.bias" || rest == ".attn.masked_bias");
}

// The GPT2Config text and where it came from (for messages).
// (look_beside: whether a config.json beside the file may be read.)
std::pair<std::string, std::string> config_source(const std::string &file,
                                                  const std::string &config_json,
                                                  const Safetensors &st, bool look_beside) {
  if (!config_json.empty()) return {read_text(config_json), "config '" + config_json + "'"};
  auto it = st.metadata.find("gpt2_config");
  if (it != st.metadata.end() && it->is_string())
    return {it->get<std::string>(), "the gpt2_config metadata of '" + file + "'"};
  const fs::path beside = fs::path(file).parent_path() / "config.json";
  std::error_code ec;
  if (look_beside && fs::is_regular_file(beside, ec))
    return {read_text(beside.string()), "config '" + beside.string() + "'"};
  fail(Status::invalid_argument, "no config for '", file,
       "': give its config.json (there is none beside it, and the file has no gpt2_config "
       "metadata of a ptdp export)");
}

// The first field where two descriptions of one model differ, with both
// values ("" when they agree).
std::string first_config_difference(const GptConfig &a, const GptConfig &b, const char *a_is,
                                    const char *b_is) {
  for (const GptConfigField &f : gpt_config_fields()) {
    std::string x, y;
    if (f.kind == GptConfigField::Float) {
      if (f.float_value(a) == f.float_value(b)) continue;
      char bx[32], by[32];  // (shown as the config's text reads: float's 7 digits)
      std::snprintf(bx, sizeof bx, "%.7g", (double)f.float_value(a));
      std::snprintf(by, sizeof by, "%.7g", (double)f.float_value(b));
      x = bx, y = by + std::string(x == by ? " (another float)" : "");
    } else if (f.kind == GptConfigField::Choice) {
      x = f.choice_name(f.int_value(a)), y = f.choice_name(f.int_value(b));
    } else {
      x = std::to_string(f.int_value(a)), y = std::to_string(f.int_value(b));
    }
    if (x != y) return std::string(f.name) + ": " + x + " in " + a_is + ", " + y + " in " + b_is;
  }
  return "";
}

// A file that carries its own config (a ptdp export's gpt2_config metadata)
// beside a config.json (the directory's, the one beside it, or the one given):
// both must describe one model. The directory form read the config.json and
// the file form the metadata, and imported two models in silence.
void check_configs_agree(const std::string &file, const Safetensors &st,
                         const std::string &config_json) {
  auto meta = st.metadata.find("gpt2_config");
  std::error_code ec;
  const fs::path beside = fs::path(file).parent_path() / "config.json";
  const std::string json_path =
      !config_json.empty() ? config_json : fs::is_regular_file(beside, ec) ? beside.string() : "";
  if (meta == st.metadata.end() || !meta->is_string() || json_path.empty()) return;
  const GptConfig own =
      gpt_config_from_gpt2(meta->get<std::string>(), "the gpt2_config metadata of '" + file + "'");
  const GptConfig json = gpt_config_from_gpt2(read_text(json_path), "config '" + json_path + "'");
  const std::string diff = first_config_difference(own, json, "the file's metadata", "config.json");
  if (!diff.empty())
    fail(Status::invalid_argument, "import_safetensors: '", file, "' carries its own config (its ",
         "gpt2_config metadata) and '", json_path, "' describes another model (", diff,
         "): make them agree, or remove one");
}

// Every tensor of the file by its GPT-2 name (GPT-2 name -> (the file's
// name, the tensor)), checked against the model `table` lists: names, shapes,
// dtypes, and lm_head tied to wte.
std::map<std::string, std::pair<std::string, const SourceTensor *>> match_tensors(
    const std::string &file, const Safetensors &st, const GptConfig &cfg, const std::string &where,
    const std::vector<ParamInfo> &table) {
  // Every tensor of the file by its GPT-2 name; the "transformer." prefix of
  // GPT2LMHeadModel dropped, buffers skipped, lm_head kept aside.
  std::map<std::string, const ParamInfo *> ours;
  for (const ParamInfo &p : table) ours[p.name] = &p;
  std::map<std::string, std::pair<std::string, const SourceTensor *>> found;
  for (const auto &[key, t] : st.tensors) {
    const std::string name = key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
    if (is_buffer(name)) continue;
    if (name != "lm_head.weight" && !ours.count(name))
      fail(Status::invalid_config, "tensor '", key, "' in '", file,
           "' is not a parameter of a GPT-2 language model (h.N.{ln_1, attn.c_attn, attn.c_proj, ",
           "ln_2, mlp.c_fc, mlp.c_proj}, wte, wpe, ln_f, lm_head) with ", cfg.num_layers,
           " layers");
    if (found.count(name))
      fail(Status::corrupt_data, "'", file, "' holds '", name, "' twice (as '", found[name].first,
           "' and '", key, "')");
    found[name] = {key, &t};
  }
  const int64_t h = cfg.hidden_size;
  for (const ParamInfo &p : table) {
    if (!found.count(p.name))
      fail(Status::invalid_config, "tensor '", p.name, "' is missing from '", file, "' (", where,
           " makes a GPT-2 of ", cfg.num_layers, " layers: h.0 to h.", cfg.num_layers - 1, ")");
    const auto &[key, t] = found[p.name];
    const Gpt2Layout l = gpt2_layout(p, cfg);
    if (t->shape != l.gpt2_shape)
      fail(Status::invalid_config, "tensor '", key, "' in '", file, "' is ", dims_text(t->shape),
           " but ", where, " makes it ", dims_text(l.gpt2_shape),
           l.transpose ? " (GPT-2's Conv1D weights are [in, out])" : "");
    check_dtype(file, key, *t);
  }
  // lm_head, when the file has one, must be wte itself: ptdp ties them.
  if (found.count("lm_head.weight")) {
    const auto &[key, t] = found["lm_head.weight"];
    const std::vector<int64_t> want{cfg.vocab_size, h};
    if (t->shape != want)
      fail(Status::invalid_config, "tensor '", key, "' in '", file, "' is ", dims_text(t->shape),
           " but ", where, " makes it ", dims_text(want));
    const std::vector<float> head = widen(file, key, *t);
    const std::vector<float> wte =
        widen(file, found["wte.weight"].first, *found["wte.weight"].second);
    if (std::memcmp(head.data(), wte.data(), head.size() * sizeof(float)) != 0)
      fail(Status::invalid_config, "'", key, "' in '", file, "' differs from wte: ptdp ties the ",
           "output layer to the input embedding, so an untied GPT-2 cannot be imported");
  }
  return found;
}

}  // namespace

GptConfig gpt_config_from_gpt2(const std::string &text, const std::string &where) {
  const json c = parse_json_text(text, where);
  if (!c.is_object()) fail(Status::corrupt_data, where, " is not a JSON object (a GPT2Config)");
  if (c.contains("model_type") && c["model_type"] != "gpt2")
    fail(Status::invalid_config, where, ": model_type is ", json_excerpt(c["model_type"]),
         "; ptdp imports gpt2");
  GptConfig g;
  g.hidden_size = positive_int(c, "n_embd", where);
  g.num_layers = positive_int(c, "n_layer", where);
  if (g.num_layers > 4096)  // the trainer's limit; also bounds the tensor list made from it
    fail(Status::invalid_config, where, ": n_layer is ", g.num_layers, "; ptdp takes at most 4096");
  g.num_attention_heads = positive_int(c, "n_head", where);
  g.max_position_embeddings = positive_int(c, "n_positions", where);
  g.seq_length = g.max_position_embeddings;
  g.vocab_size = positive_int(c, "vocab_size", where);
  g.layernorm_epsilon = number(field(c, "layer_norm_epsilon", where), "layer_norm_epsilon", where);
  if (!(g.layernorm_epsilon > 0.f))
    fail(Status::invalid_config, where, ": 'layer_norm_epsilon' must be > 0, got ",
         g.layernorm_epsilon);
  const json &act = field(c, "activation_function", where);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail(Status::invalid_config, where, ": activation_function is ", json_excerpt(act),
         ", but ptdp's MLP computes the tanh GeLU: only \"gelu_new\" (or \"gelu_pytorch_tanh\", ",
         "the same function) can be imported");
  if (c.contains("n_inner") && !c["n_inner"].is_null()) {
    const int f = positive_int(c, "n_inner", where);
    g.ffn_hidden_size = (int64_t)f == 4 * (int64_t)g.hidden_size ? 0 : f;
  }
  g.attention_dropout = probability(c, "attn_pdrop", where);
  g.hidden_dropout = probability(c, "resid_pdrop", where);
  const float embd = probability(c, "embd_pdrop", where);
  if (embd != g.hidden_dropout)
    fail(Status::invalid_config, where, ": embd_pdrop (", embd, ") differs from resid_pdrop (",
         g.hidden_dropout, "); ptdp drops the embeddings' output with its hidden_dropout, so ",
         "they must be equal");
  if (c.contains("initializer_range") && !c["initializer_range"].is_null())
    g.init_method_std = number(c["initializer_range"], "initializer_range", where);
  // Variants of GPT-2 that ptdp does not compute.
  const struct {
    const char *key;
    bool unsupported;
    const char *why;
  } variants[] = {{"scale_attn_weights", false, "ptdp scales attention scores by 1/sqrt(head dim)"},
                  {"scale_attn_by_inverse_layer_idx", true, "ptdp does not scale by layer"},
                  {"add_cross_attention", true, "ptdp's GPT has no cross-attention"},
                  {"tie_word_embeddings", false, "ptdp ties the output layer to wte"}};
  for (const auto &v : variants) {
    if (c.contains(v.key) && !c[v.key].is_null() && !c[v.key].is_boolean())
      fail(Status::invalid_config, where, ": ", v.key, " must be true or false, got ", json_excerpt(c[v.key]));
    if (c.contains(v.key) && c[v.key].is_boolean() && c[v.key].get<bool>() == v.unsupported)
      fail(Status::invalid_config, where, ": ", v.key, " is ", v.unsupported ? "true" : "false",
           ", which ptdp cannot import (", v.why, ")");
  }
  if (g.hidden_size % g.num_attention_heads != 0)
    fail(Status::invalid_config, where, ": n_head (", g.num_attention_heads,
         ") does not divide n_embd (", g.hidden_size, ")");
  try {
    g.validate(1);
  } catch (const Error &e) {
    fail(Status::invalid_config, where, ": ", e.what());
  }
  return g;
}

GptConfig check_safetensors(const unsigned char *data, size_t size, const std::string &file) {
  const Safetensors st = parse_safetensors(file, data, size);
  const auto [config_text, where] = config_source(file, "", st, false);
  const GptConfig cfg = gpt_config_from_gpt2(config_text, where);
  match_tensors(file, st, cfg, where, gpt_param_table(cfg, 1, {}));
  return cfg;
}

std::string import_safetensors(const std::string &path, const std::string &config_path,
                               const std::string &dir) {
  if (path.empty()) fail(Status::invalid_argument, "import_safetensors: no safetensors file given");
  if (dir.empty())
    fail(Status::invalid_argument, "import_safetensors: no checkpoint directory given");
  // A model directory as save_pretrained writes it: its config.json and its
  // weights, sharded (model.safetensors.index.json) or not.
  std::string file = path, config_json = config_path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (config_json.empty()) config_json = (fs::path(path) / "config.json").string();
    // One file first, as transformers reads a directory holding both.
    const fs::path one = fs::path(path) / "model.safetensors";
    file = (fs::exists(one, ec) ? one : fs::path(path) / "model.safetensors.index.json").string();
  }
  const bool sharded = ends_with(file, ".index.json");
  const fs::path beside = fs::path(file).parent_path() / "config.json";
  // The model's files are inputs of this process's run from now on: no output
  // of it (a fine-tuning recipe's --log-json or --timeline) may replace them.
  // A model directory's every file; else the weights, their shards and configs.
  const fs::path model_dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(file).parent_path();
  // The checkpoint tree goes beside a model directory (or a sharded model's),
  // never into it (a recipe's import had put iter_0000000 and latest among
  // the model's files). A directory holding a model's config.json and weights
  // is a model's: the weights' (named by their file: they went among the
  // files the directory named was refused for) and the config's given apart
  // (its model's directory took them too); a lone file's directory may hold
  // other things: only the directory itself is refused.
  {
    fs::path out_real = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    if (out_real.has_parent_path() && out_real.filename().empty()) out_real = out_real.parent_path();  // ("ex/")
    const bool weights_in_model_dir = fs::is_directory(path, ec) || sharded || fs::exists(beside, ec);
    std::vector<std::pair<fs::path, bool>> model_dirs = {{model_dir, weights_in_model_dir}};
    if (!config_path.empty()) {
      const fs::path c = fs::path(config_path).parent_path();
      model_dirs.push_back({c, fs::exists(c / "model.safetensors", ec) ||
                                   fs::exists(c / "model.safetensors.index.json", ec)});
    }
    for (const auto &[m, whole_tree] : model_dirs) {
      const fs::path m_real = fs::weakly_canonical(fs::absolute(m.empty() ? "." : m, ec), ec);
      const auto [m_end, o_at] = std::mismatch(m_real.begin(), m_real.end(), out_real.begin(), out_real.end());
      const bool inside = !m_real.empty() && m_end == m_real.end();
      if (whole_tree ? inside : inside && o_at == out_real.end())
        fail(Status::invalid_argument, "import_safetensors: checkpoint directory '", dir, "' is the model's ",
             "directory '", m.empty() ? "." : m.string(), whole_tree ? "' or inside it" : "'",
             ": the import's checkpoints (iter_N, latest) go into a directory of their own; give one ",
             whole_tree ? "outside the model's" : "of their own");
    }
  }
  for (fs::directory_iterator it(model_dir.empty() ? "." : model_dir, ec), end; !ec && it != end; it.increment(ec))
    if (fs::is_directory(path) || (sharded && ends_with(it->path().string(), ".safetensors")))
      hold_input(it->path().string(), "imported model's file");
  for (const std::string &f : {file, config_json, beside.string()})
    if (!f.empty()) hold_input(f, "imported model's file");
  if (config_json.empty() && (sharded || fs::is_regular_file(beside, ec))) {
    // The LLaMA family's files carry no config of their own: the one beside them.
    const std::string text = read_text(beside.string());
    if (is_llama_family(text) || sharded)
      return import_llama(file, text, "config '" + beside.string() + "'", dir);
  } else if (!config_json.empty()) {
    const std::string text = read_text(config_json);
    if (is_llama_family(text) || sharded)
      return import_llama(file, text, "config '" + config_json + "'", dir);
  }
  const MappedFile map(file, "'" + file + "'");
  const Safetensors st = parse_safetensors(file, map.data(), map.size());
  const auto [config_text, where] = config_source(file, config_json, st, true);
  const GptConfig cfg = gpt_config_from_gpt2(config_text, where);
  check_configs_agree(file, st, config_json);

  const std::vector<ParamInfo> table = gpt_param_table(cfg, 1, {});
  auto found = match_tensors(file, st, cfg, where, table);
  const int64_t h = cfg.hidden_size, hd = cfg.head_dim();

  std::map<std::string, std::string> training = imported_source(file);
  record_tokenizer(file, st.metadata, training);
  check_import_target(dir, cfg, training);

  // The parameters in ptdp's flat layout (wte's padding rows stay zero).
  size_t total = 0;
  for (const ParamInfo &p : table) total = std::max(total, p.offset + p.numel);
  std::vector<float> params(total, 0.f);
  for (const ParamInfo &p : table) {
    const auto &[key, t] = found[p.name];
    place(gpt2_layout(p, cfg), widen(file, key, *t), h, hd, params.data() + p.offset);
  }
  return save_imported(dir, cfg, table, params, training);
}

}  // namespace ptdp
