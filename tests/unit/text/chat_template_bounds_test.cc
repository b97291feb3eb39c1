// Hostile chat templates and conversations (a checkpoint's template and a request's messages are
// both untrusted): each bound of framework/text/jinja/limits.h is an mg::Error naming it, where
// the code before the bounds overflowed the stack, hung, allocated without limit, overflowed
// integers (undefined behaviour) or leaked a cycle on every render. Next to each refusal, the
// nearest case a real template needs still renders as jinja2 does.
#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/text/chat_template.h"
#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/limits.h"
#include "framework/text/jinja/value.h"
#include "tests/unit/io/io_test_util.h"

namespace mg::text {
namespace {

using ojson = nlohmann::ordered_json;

std::string render(const std::string& source, const ojson& messages = ojson::array()) {
  return ChatTemplate(source, "t").render(messages);
}

template <typename Fn>
::testing::AssertionResult throws_error_with(Fn&& fn, const std::string& part) {
  return mg::testing::throws_error_with(std::forward<Fn>(fn), {part});
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(ChatTemplateBounds, SourceNestingIsBoundedAtParse) {
  // Each of these overflowed the stack (ASan stack-overflow) in the parser or the evaluator.
  EXPECT_TRUE(throws_error_with(
      [] { ChatTemplate("{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}", "t"); },
      "line 1: expressions nested more than 100 deep"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{{ " + repeat("not ", 100000) + "1 }}", "t"); },
                                "nested more than 100 deep"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{{ " + repeat("- ", 100000) + "1 }}", "t"); },
                                "nested more than 100 deep"));
  EXPECT_TRUE(
      throws_error_with([] { ChatTemplate("{{ 1 " + repeat("if 1 else 1 ", 100000) + "}}", "t"); },
                        "nested more than 100 deep"));
  EXPECT_TRUE(throws_error_with(
      [] { ChatTemplate(repeat("{% if 1 %}", 20000) + repeat("{% endif %}", 20000), "t"); },
      "line 1: blocks nested more than 100 deep"));
  // A left-deep chain is built by a loop, not recursion: the node count bounds it.
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{{ " + repeat("1+", 200000) + "1 }}", "t"); },
                                "line 1: an expression of more than 2000 parts"));
  // What real templates nest renders.
  EXPECT_EQ(render("{{ " + repeat("(", 30) + "1" + repeat(")", 30) + " }}"), "1");
  EXPECT_EQ(render(repeat("{% if 1 %}", 30) + "x" + repeat("{% endif %}", 30)), "x");
  EXPECT_EQ(render("{{ " + repeat("1+", 300) + "1 }}"), "301");
  // A chain within the node count but deeper than evaluation may go is refused when run.
  EXPECT_TRUE(throws_error_with([] { render("{{ " + repeat("1+", 700) + "1 }}"); },
                                "nested more than 400 deep"));
}

TEST(ChatTemplateBounds, IntegersOverflowToAnErrorNotUndefinedBehaviour) {
  EXPECT_TRUE(throws_error_with([] { render("{{ 9223372036854775807 + 1 }}"); },
                                "line 1: integer overflow in '+'"));
  EXPECT_TRUE(throws_error_with([] { render("{{ -9223372036854775807 - 2 }}"); },
                                "integer overflow in '-'"));
  EXPECT_TRUE(throws_error_with([] { render("{{ 3 * 9223372036854775807 }}"); },
                                "integer overflow in '*'"));
  EXPECT_TRUE(throws_error_with([] { render("{{ 2 ** 63 }}"); }, "integer overflow in '**'"));
  EXPECT_TRUE(throws_error_with([] { render("{{ -(-9223372036854775807 - 1) }}"); },
                                "integer overflow in unary '-'"));
  EXPECT_TRUE(throws_error_with([] { render("{{ (-9223372036854775807 - 1) // -1 }}"); },
                                "integer overflow in '//'"));
  EXPECT_TRUE(throws_error_with([] { render("{{ (-9223372036854775807 - 1) | abs }}"); },
                                "abs: integer overflow"));
  EXPECT_TRUE(throws_error_with([] { render("{{ [9223372036854775807, 1] | sum }}"); },
                                "sum: integer overflow"));
  // Python's values where they fit; ** by squaring, so a huge exponent is quick.
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ 3 * 2 ** 2 }} {{ 0 ** 0 }} {{ (-1) ** 9223372036854775807 }}"),
            "4611686018427387904 12 1 -1");
  EXPECT_EQ(render("{{ -5 // 2 }} {{ -5 % 3 }} {{ 5 % -3 }} {{ (-9223372036854775807 - 1) % -1 }}"),
            "-3 1 -1 0");
  // Float literals past a double's range are inf (below it 0.0), as Python's float() makes them
  // (std::stod threw std::out_of_range at parse: found by fuzz_chat_template).
  EXPECT_EQ(render("{{ 1e666 }} {{ -1e666 }} {{ 1e-999 }}"), "inf -inf 0.0");
  // int() of a float it cannot hold gives the default, as jinja2's int filter does.
  EXPECT_EQ(render("{{ 1e300 | int }} {{ 2.9 | int }} {{ -2.9 | int }}"), "0 2 -2");
  EXPECT_EQ(render("{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904) "
                   "| list }}"),
            "[-9223372036854775807, -4611686018427387903, 1, 4611686018427387905]");
}

TEST(ChatTemplateBounds, ValuesAreBoundedBeforeTheyAreBuilt) {
  // ('x' * 10^6) * 10^6 allocated a terabyte; doubling a string 100 times did the same slowly.
  EXPECT_TRUE(throws_error_with([] { render("{{ ('x' * 1000000) * 1000000 }}"); },
                                "'*' would make a string of 1000000000000 bytes"));
  EXPECT_TRUE(throws_error_with([] { render("{{ ([1] * 1000000) * 1000000 }}"); },
                                "'*' would make a list of 1000000000000 items"));
  EXPECT_TRUE(throws_error_with(
      [] {
        render(
            "{% set ns = namespace(s='x') %}{% for i in range(100) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
      },
      "'~' would make a string of 33554432 bytes"));
  EXPECT_TRUE(throws_error_with([] { render("{{ range(2000000) | list | length }}"); },
                                "range() would make a list of 2000000 items"));
  EXPECT_TRUE(
      throws_error_with([] { render("{{ ('x' * 2000000) | replace('', 'yyyyyyyyyyyy') }}"); },
                        "replace would make a string"));
  EXPECT_TRUE(throws_error_with([] { render("{{ (['x' * 1000000] * 20) | join('') }}"); },
                                "join would make a string"));
  EXPECT_TRUE(throws_error_with([] { render("{{ 'a' | indent(100000000) }}"); },
                                "indent would make a string"));
  EXPECT_TRUE(throws_error_with([] { render("{{ [1] | tojson(indent=100000000) }}"); },
                                "tojson: indent 100000000 is outside 0..1024"));
  // A negative width pads nothing, as Python's ' ' * -1 (it threw std::length_error).
  EXPECT_EQ(render("{{ 'a\nb' | indent(-1, true) }}"), "a\nb");
  EXPECT_EQ(render("{{ 'ab' * -2 }}|{{ 'ab' * 2 }}|{{ [1] * 3 }}"), "|abab|[1, 1, 1]");
  // Nothing repeated many times is nothing, at once (it looped 2^63 times).
  EXPECT_EQ(render("{{ '' * 9223372036854775807 }}|{{ ([] * 9223372036854775807) | length }}"),
            "|0");
}

TEST(ChatTemplateBounds, LoopsAreBoundedByTheWorkBudget) {
  // 10^12 iterations: this hung.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(throws_error_with(
      [] {
        render(
            "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}"
            "{% endfor %}");
      },
      "the template did more than 25000000 steps of work"));
  // Work that is cheap per step in count but not in bytes: scanning a 16 MB string in a loop.
  EXPECT_TRUE(throws_error_with(
      [] {
        render(
            "{% set s = 'x' * 16000000 %}{% for i in range(1000000) %}"
            "{% if 'y' in s %}{% endif %}{% endfor %}");
      },
      "steps of work"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  // The budget is per render: a lowered one refuses what the default allows.
  const ChatTemplate loop("{% for i in range(1000) %}{{ i }}{% endfor %}", "t");
  EXPECT_EQ(loop.render(ojson::array()).size(), 2890u);
  ChatRenderOptions options;
  options.work_limit = 1000;
  EXPECT_TRUE(throws_error_with([&] { loop.render(ojson::array(), options); },
                                "the template did more than 1000 steps of work"));
}

// What real templates take: every family's template on every test conversation within 20,000
// units of work, and a 1,000-turn conversation within 1% of the budget.
TEST(ChatTemplateBounds, RealTemplatesStayFarBelowTheWorkBudget) {
  const std::filesystem::path dir =
      std::filesystem::path(MG_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";
  const ojson conversations = ojson::parse(mg::testing::read_bytes(dir / "conversations.json"));
  ojson long_conversation = ojson::array();
  for (int i = 0; i < 1000; ++i) {
    long_conversation.push_back(
        {{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", std::string(400, 'w')}});
  }
  int families = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++families;
    SCOPED_TRACE(entry.path().filename().string());
    const ChatTemplate t(mg::testing::read_bytes(entry.path()), "t");
    for (const ojson& conv : conversations) {
      ChatRenderOptions options;
      options.now = 1741953600;
      options.add_generation_prompt = conv.value("add_generation_prompt", true);
      if (conv.contains("tools")) options.tools = conv["tools"];
      if (conv.contains("kwargs")) options.kwargs = conv["kwargs"];
      std::string full;
      try {
        full = t.render(conv["messages"], options);
      } catch (const Error&) {
        continue;  // the template refuses it (a bad alternation), as jinja2 does
      }
      options.work_limit = 20000;
      EXPECT_EQ(t.render(conv["messages"], options), full) << conv["name"];
    }
    ChatRenderOptions options;
    options.work_limit = jinja::kMaxRenderWork / 100;
    EXPECT_NO_THROW(t.render(long_conversation, options));
  }
  EXPECT_EQ(families, 9);
}

TEST(ChatTemplateBounds, SelfContainingValuesAreRefusedAndFreed) {
  // str(), == and tojson recursed without end on a namespace holding itself (stack overflow);
  // the cycle then leaked on every render (LeakSanitizer, were the test built with ASan).
  const std::string self = "{% set ns = namespace() %}{% set ns.self = ns %}";
  EXPECT_TRUE(throws_error_with([&] { render(self + "{{ ns }}"); },
                                "line 1: str: a value nested more than 256 deep"));
  EXPECT_TRUE(throws_error_with([&] { render(self + "{{ ns == ns }}"); },
                                "==: a value nested more than 256 deep"));
  EXPECT_TRUE(throws_error_with([&] { render(self + "{{ ns | tojson }}"); },
                                "tojson: a value nested more than 256 deep"));
  // A chain of 200,000 namespaces is freed without recursing once per link.
  EXPECT_EQ(render("{% set ns = namespace(x=none) %}{% for i in range(200000) %}"
                   "{% set ns.x = namespace(prev=ns.x) %}{% endfor %}done"),
            "done");
}

TEST(ChatTemplateBounds, DeepJsonIsRefusedNotRecursedInto) {
  // The request's messages and tools reach the template as JSON; 10^5 nested arrays overflowed
  // the stack converting them.
  ojson deep = ojson::array();
  ojson* at = &deep;
  for (int i = 0; i < 100000; ++i) {
    at->push_back(ojson::array());
    at = &(*at)[0];
  }
  ojson message = ojson::object();
  message["role"] = "user";
  message["content"] = "hi";
  message["extra"] = std::move(deep);  // moved, not copied: copying recurses (nlohmann frees
                                       // without recursion)
  ojson messages = ojson::array();
  messages.push_back(std::move(message));
  EXPECT_TRUE(throws_error_with([&] { render("{{ messages[0].content }}", messages); },
                                "JSON: a value nested more than 256 deep"));
}

TEST(ChatTemplateBounds, ArgumentsOfTheWrongTypeAreErrors) {
  // strip(5) read a string out of an int (UBSan: a null reference; a crash in a release build):
  // found by fuzz_chat_template.
  EXPECT_TRUE(throws_error_with([] { render("{{ ' a '.strip(5) }}"); },
                                "strip: the characters to strip must be a string, got int"));
  EXPECT_TRUE(throws_error_with([] { render("{{ ' a ' | trim([1]) }}"); },
                                "strip: the characters to strip must be a string, got list"));
  EXPECT_EQ(render("[{{ ' a '.strip() }}|{{ 'xax'.strip('x') }}|{{ ' a '.lstrip(none) }}]"),
            "[a|a|a ]");
}

TEST(ChatTemplateBounds, StringIndexingAndSlicingGoByCharacters) {
  // Indexing a string no longer builds a list of all its characters.
  EXPECT_EQ(render("{{ 'héllo'[1] }}|{{ 'héllo'[1:4] }}|{{ 'héllo'[::-1] }}|{{ 'héllo' | reverse }}"
                   "|{{ 'héllo'[-1] }}|{{ 'héllo'[9] }}"),
            "é|éll|olléh|olléh|o|");
  // A step past int64's range after the first index (the index arithmetic overflowed).
  EXPECT_EQ(render("{{ 'abc'[1::9223372036854775807] }}|{{ [1, 2, 3][2::-9223372036854775807] }}"),
            "b|[3]");
  EXPECT_EQ(
      render("{{ [1, 2] | map(attribute='99999999999999999999') | select('defined') | list }}"),
      "[]");
}

}  // namespace
}  // namespace mg::text
