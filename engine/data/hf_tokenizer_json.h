// Parts of a Hugging Face tokenizer.json that more than one kind of tokenizer
// reads (engine/data/bpe_tokenizer, sp_bpe_tokenizer).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ptdp {

// A TemplateProcessing post-processor's "single" template, [specials...,
// $A, specials...]: the ids of the special tokens before and after the text
// (from its "special_tokens"). Anything else, a pair-only template, a second
// sequence, a special token without ids, is corrupt_data naming `what`.
std::pair<std::vector<int32_t>, std::vector<int32_t>> template_specials(
    const nlohmann::json &post, const std::string &who, const std::string &what);

}  // namespace ptdp
