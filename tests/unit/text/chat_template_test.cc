// Chat templates: every family's template (tests/fixtures/chat_templates) rendered on every
// conversation must equal Python jinja2's rendering byte for byte (expected.json, written by
// tools/hf/make_chat_template_expected.py); what jinja2 refuses we refuse. Beside them, small
// hand-checked cases of the Jinja subset and the refusals of what it leaves out.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "framework/core/error.h"
#include "framework/text/chat_template.h"
#include "framework/text/jinja/value.h"
#include "tests/unit/io/io_test_util.h"

namespace mg::text {
namespace {

// One expected part of the message.
template <typename Fn>
::testing::AssertionResult throws_error_with(Fn&& fn, const std::string& part) {
  return mg::testing::throws_error_with(std::forward<Fn>(fn), {part});
}
using ojson = nlohmann::ordered_json;

const std::filesystem::path kDir =
    std::filesystem::path(MG_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";
// 2025-03-14 12:00 UTC, the script's pinned strftime_now (only dates are printed, so the local
// time zone does not change them).
constexpr std::time_t kNow = 1741953600;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplate, EveryFamilyMatchesJinja2) {
  const ojson expected = ojson::parse(read_file(kDir / "expected.json"));
  const ojson conversations = ojson::parse(read_file(kDir / "conversations.json"));
  int compared = 0;
  int refused = 0;
  for (const auto& [family, spec] : expected["families"].items()) {
    SCOPED_TRACE(family);
    ChatTemplate t(read_file(kDir / (family + ".jinja")), family);
    t.set_special_tokens(spec["bos_token"], spec["eos_token"]);
    ASSERT_EQ(spec["cases"].size(), conversations.size());
    for (size_t i = 0; i < conversations.size(); ++i) {
      const ojson& conv = conversations[i];
      const ojson& want = spec["cases"][i];
      SCOPED_TRACE(conv["name"].get<std::string>());
      ChatRenderOptions options;
      options.now = kNow;
      options.add_generation_prompt = conv.value("add_generation_prompt", true);
      if (conv.contains("tools")) options.tools = conv["tools"];
      if (conv.contains("kwargs")) options.kwargs = conv["kwargs"];
      if (want.contains("error")) {
        // jinja2 refused it; so must we, with the template's own message when it raised one.
        const std::string message =
            want["raised"].get<bool>() ? want["error"].get<std::string>() : "chat template";
        EXPECT_TRUE(throws_error_with([&] { t.render(conv["messages"], options); }, message));
        ++refused;
      } else {
        EXPECT_EQ(t.render(conv["messages"], options), want["text"].get<std::string>());
        ++compared;
      }
    }
  }
  EXPECT_EQ(expected["families"].size(), 9u);
  EXPECT_GE(compared, 60);
  EXPECT_GE(refused, 10);
}

// Real checkpoints' templates, when given: MG_CHAT_TEMPLATE_EXPECTED names the JSON that
// `tools/hf/make_chat_template_expected.py --check FILE.jinja ...` printed (keyed by file path).
TEST(ChatTemplate, TemplatesNamedByEnvironmentMatchJinja2) {
  const char* path = std::getenv("MG_CHAT_TEMPLATE_EXPECTED");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set MG_CHAT_TEMPLATE_EXPECTED to the output of "
                    "make_chat_template_expected.py --check to compare other templates";
  }
  const ojson expected = ojson::parse(read_file(path));
  const ojson conversations = ojson::parse(read_file(kDir / "conversations.json"));
  for (const auto& [file, cases] : expected.items()) {
    SCOPED_TRACE(file);
    ChatTemplate t(read_file(file), file);
    t.set_special_tokens("<s>", "</s>");
    for (size_t i = 0; i < conversations.size(); ++i) {
      const ojson& conv = conversations[i];
      SCOPED_TRACE(conv["name"].get<std::string>());
      ChatRenderOptions options;
      options.now = kNow;
      options.add_generation_prompt = conv.value("add_generation_prompt", true);
      if (conv.contains("tools")) options.tools = conv["tools"];
      if (conv.contains("kwargs")) options.kwargs = conv["kwargs"];
      if (cases[i].contains("error")) {
        EXPECT_THROW(t.render(conv["messages"], options), Error);
      } else {
        EXPECT_EQ(t.render(conv["messages"], options), cases[i]["text"].get<std::string>());
      }
    }
  }
}

std::string render(const std::string& source, const ojson& messages = ojson::array(),
                   ojson kwargs = ojson::object()) {
  ChatRenderOptions options;
  options.kwargs = std::move(kwargs);
  options.now = kNow;
  return ChatTemplate(source, "t").render(messages, options);
}

TEST(ChatTemplate, WhitespaceControlAsTransformersSetsIt) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one;
  // `-` strips all whitespace on its side; output tags are left alone; one trailing newline of
  // the template goes.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb\n"), "  a\nb");
  EXPECT_EQ(render("x  {%- if true -%}  y  {%- endif %}"), "xy");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");
  EXPECT_EQ(render("  {# comment #}\nz"), "z");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
}

TEST(ChatTemplate, ScopingAsJinja2) {
  // A for loop's assignments stay in the iteration; namespace() carries values out; an if does
  // not scope; a macro sees top-level names set before it is called.
  EXPECT_EQ(render("{% set c = 0 %}{% for i in [1,2,3] %}{% set c = c + i %}[{{c}}]{% endfor %}"
                   "{{c}}"),
            "[1][2][3]0");
  EXPECT_EQ(render("{% set ns = namespace(c=0) %}{% for i in [1,2,3] %}{% set ns.c = ns.c + i %}"
                   "{% endfor %}{{ ns.c }}"),
            "6");
  EXPECT_EQ(render("{% if true %}{% set z = 3 %}{% endif %}{{ z }}"), "3");
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ g }}{% endmacro %}{% set g = 7 %}"
                   "{{ m(1) }}{{ m(2, b='x') }}"),
            "1B72x7");
}

TEST(ChatTemplate, PythonValuesPrintAsPython) {
  EXPECT_EQ(render("{{ [1, 'a'] }} {{ {'k': 1.0} }} {{ none }} {{ true }} {{ 1/2 }} {{ 7//2 }}"
                   " {{ -7 % 3 }} {{ 'ab' * 2 }} {{ 1e-5 }}"),
            "[1, 'a'] {'k': 1.0} None True 0.5 3 2 abab 1e-05");
  EXPECT_EQ(render("{{ x | tojson }}|{{ x | tojson(indent=2) }}", ojson::array(),
                   ojson{{"x", ojson::parse(R"({"a": [1, 2.5, "é\n"], "b": {}})")}}),
            "{\"a\": [1, 2.5, \"é\\n\"], \"b\": {}}|{\n  \"a\": [\n    1,\n    2.5,\n    "
            "\"é\\n\"\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  x '.strip() }} {{ 'hello'[1:-1] }}"
                   " {{ [1,2,3][::-1] }} {{ 'Grüße'|length }} {{ 'Grüße'[::-1] }}"),
            "['a', 'b', '', 'c'] x ell [3, 2, 1] 5 eßürG");
}

TEST(ChatTemplate, FiltersAndTests) {
  const ojson parts = ojson::parse(R"([{"type": "text", "text": " a "}, {"type": "image"},
                                       {"type": "text", "text": "b"}])");
  EXPECT_EQ(render("{{ p | selectattr('type', 'equalto', 'text') | map(attribute='text') |"
                   " map('trim') | join('+') }}",
                   ojson::array(), ojson{{"p", parts}}),
            "a+b");
  EXPECT_EQ(render("{{ x is defined }} {{ y is defined }} {{ 3 is odd }} {{ 'a' is string }}"
                   " {{ {} is mapping }} {{ none is none }} {{ [] is iterable }}"
                   " {{ y | default('d') }} {{ 2 in [1, 2] }} {{ 'k' not in {'k': 1} }}",
                   ojson::array(), ojson{{"x", 1}}),
            "True False True True True True True d True False");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
                   "{% for i in range(5) if i is even %}{{ i }}{% if loop.last %}!{% endif %}"
                   "{% endfor %}{% for i in [] %}x{% else %}empty{% endfor %}",
                   ojson::array(), ojson{{"d", ojson::parse(R"({"z": 1, "a": 2})")}}),
            "z=1;a=2;024!empty");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}"
                   "{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"),
            "02");
}

TEST(ChatTemplate, UnsupportedFeaturesFailAtLoad) {
  // Refused when the template is parsed (server start), each naming the line and the construct.
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{% include 'x' %}", "t"); },
                                "t: chat template: line 1: the statement '{% include %}'"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("\n{{ x | wordwrap }}", "t"); },
                                "line 2: the filter 'wordwrap' is not supported"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{{ x is escaped }}", "t"); },
                                "the test 'escaped' is not supported"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{{ x.append(1) }}", "t"); },
                                "the method 'append' is not supported"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{% if x %}", "t"); },
                                "ends inside a block (expected 'elif')"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{{ 'a' ", "t"); }, "is not closed"));
  EXPECT_TRUE(throws_error_with([] { ChatTemplate("{% for x in y recursive %}{% endfor %}", "t"); },
                                "recursive for loops are not supported"));
}

TEST(ChatTemplate, RenderErrorsNameTheLine) {
  EXPECT_TRUE(throws_error_with([] { render("\n\n{{ raise_exception('roles must alternate') }}"); },
                                "line 3: raise_exception: roles must alternate"));
  EXPECT_TRUE(throws_error_with([] { render("{{ 'a' + 1 }}"); },
                                "unsupported operand types for +: str and int"));
  EXPECT_TRUE(throws_error_with([] { render("{{ x.y }}"); }, "'x' is undefined"));
  EXPECT_TRUE(throws_error_with([] { render("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"); },
                                "nested more than"));
}

TEST(ChatTemplate, LoadsFromTokenizerConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "mg_chat_template_test";
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(ChatTemplate::load_for_model(dir).has_value());
  {
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
               "chat_template": [{"name": "tool_use", "template": "T"},
                                 {"name": "default", "template": "{{ bos_token }}D{{ eos_token }}"}]})";
  }
  auto t = ChatTemplate::load_for_model(dir);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(ojson::array()), "<s>D</s>");
  { std::ofstream(dir / "chat_template.jinja") << "J{{ bos_token }}"; }
  EXPECT_EQ(ChatTemplate::load_for_model(dir)->render(ojson::array()), "J<s>");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, DefaultTemplateIsChatMl) {
  ChatTemplate t(kDefaultChatTemplate, "default");
  EXPECT_EQ(t.render(ojson::parse(R"([{"role": "user", "content": "hi"}])")),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateValue, PythonFloatRepr) {
  using jinja::python_float_repr;
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(100000.0), "100000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(123456789012345678.0), "1.2345678901234568e+17");
}

}  // namespace
}  // namespace mg::text
