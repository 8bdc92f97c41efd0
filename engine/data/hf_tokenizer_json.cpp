#include "engine/data/hf_tokenizer_json.h"

#include "engine/core/json_text.h"
#include "engine/core/status.h"

namespace ptdp {

std::pair<std::vector<int32_t>, std::vector<int32_t>> template_specials(
    const nlohmann::json &post, const std::string &who, const std::string &what) {
  auto bad = [&](const std::string &why) {
    fail(Status::corrupt_data, who, ": ", what, ": post_processor ", why, " (", json_excerpt(post), ")");
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
        bad("gives '" + name + "' the id " + json_excerpt(id));
      (text ? after : before).push_back((int32_t)id.get<int64_t>());
    }
  }
  if (!text) bad("has no $A in its single template");
  return {before, after};
}

std::vector<std::pair<std::string, std::string>> parse_merges(const nlohmann::json &merges,
                                                              const std::string &who,
                                                              const std::string &what) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto &e : merges) {
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp != std::string::npos && sp > 0 && sp + 1 < s.size() &&
          s.find(' ', sp + 1) == std::string::npos) {
        out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        continue;
      }
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      out.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      continue;
    }
    fail(Status::corrupt_data, who, ": ", what, ": merge ", out.size() + 1, " is ", json_excerpt(e),
         "; a merge is \"left right\" or [\"left\", \"right\"]");
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> parse_added_tokens(const nlohmann::json &tokenizer,
                                                                const std::string &who,
                                                                const std::string &what) {
  const nlohmann::json added = tokenizer.value("added_tokens", nlohmann::json::array());
  if (!added.is_array())
    fail(Status::corrupt_data, who, ": ", what, ": added_tokens is ", json_excerpt(added), "; it is a list");
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto &a : added) {
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty() || !a.contains("id") || !a["id"].is_number_integer())
      fail(Status::corrupt_data, who, ": ", what, ": added token ", json_excerpt(a),
           " needs a non-empty string \"content\" and an integer \"id\"");
    for (const char *flag : {"lstrip", "rstrip", "single_word"})
      if (a.value(flag, false))
        fail(Status::corrupt_data, who, ": ", what, ": added token's ", flag, " is ", json_excerpt(a),
             "; ptdp takes it false");
    out.emplace_back(a["content"].get<std::string>(), a["id"].get<int64_t>());
  }
  return out;
}

}  // namespace ptdp
