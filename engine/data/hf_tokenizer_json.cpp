#include "engine/data/hf_tokenizer_json.h"

#include "engine/core/status.h"

namespace ptdp {

std::pair<std::vector<int32_t>, std::vector<int32_t>> template_specials(
    const nlohmann::json &post, const std::string &who, const std::string &what) {
  auto bad = [&](const std::string &why) {
    fail(Status::corrupt_data, who, ": ", what, ": post_processor ", why, " (", post.dump(), ")");
  };
  if (!post.contains("single") || !post["single"].is_array())
    bad("TemplateProcessing has no \"single\" template");
  const nlohmann::json specials = post.value("special_tokens", nlohmann::json::object());
  if (!specials.is_object()) bad("special_tokens is not an object");
  std::vector<int32_t> before, after;
  bool text = false;
  for (const nlohmann::json &piece : post["single"]) {
    if (piece.is_object() && piece.contains("Sequence")) {
      if (text || piece["Sequence"].value("id", "") != "A") bad("has a template other than $A");
      text = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string())
      bad("has a piece that is neither a SpecialToken nor $A");
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.contains(name) || !specials[name].is_object() || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array())
      bad("names the special token '" + name + "' without its ids");
    for (const nlohmann::json &id : specials[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
        bad("gives '" + name + "' the id " + id.dump());
      (text ? after : before).push_back((int32_t)id.get<int64_t>());
    }
  }
  if (!text) bad("has no $A in its single template");
  return {before, after};
}

}  // namespace ptdp
