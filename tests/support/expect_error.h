// Asserts that f() throws ptdp::Error with `code` and a message containing `text`.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "engine/core/status.h"

template <class F>
void expect_error(F f, ptdp::Status code, const std::string &text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << text;
  } catch (const ptdp::Error &e) {
    EXPECT_EQ((int)e.code(), (int)code) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}
