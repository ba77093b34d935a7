#include "docgen/describe_app.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "docgen/completion_script.h"
#include "docgen/man_page.h"

namespace gpupool::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A small command line with what the real ones use: nesting, choices, paths, job ids, an
// optional value, a hidden option, footers.
struct Example {
  std::string policy = "fifo", level, trace, root, id, wait, secret;
  int count = 2;
  bool json = false;
  std::vector<std::string> command;
  CLI::App app{"tool: does things", "tool"};

  Example() {
    app.footer(".Footer with a leading dot and a \\ backslash");
    auto* sim = app.add_subcommand("sim", "Simulate");
    auto* replay = sim->add_subcommand("replay", "Replay a trace");
    replay->add_option("--policy", policy, "The policy")->check(CLI::IsMember({"fifo", "backfill"}));
    replay->add_option("--level", level, "How loud")
        ->transform(CLI::CheckedTransformer(std::map<std::string, int>{{"low", 1}, {"high", 2}}));
    replay->add_option("--trace", trace, "Trace file")->required()->type_name("FILE");
    replay->add_option("-n,--count", count, "How many")->capture_default_str();
    replay->add_option("--root", root, "Root")->check(CLI::ExistingDirectory);
    replay->add_option("--secret", secret, "Not shown")->group("");
    auto* show = app.add_subcommand("show", "Show a job");
    show->add_option("id", id, "Job id")->required()->type_name("JOB_ID");
    show->add_flag("--json", json, "Print JSON");
    auto* run = app.add_subcommand("run", "Run a command");
    run->add_option("--wait", wait, "Wait this long")->expected(0, 1);
    run->add_option("command", command, "The command")->required()->type_name("COMMAND");
  }
};

const OptionDoc& named(const CommandDoc& command, const std::string& name) {
  for (const OptionDoc& option : command.options) {
    if ((!option.long_names.empty() && option.long_names.front() == name) || option.positional == name) return option;
  }
  throw std::runtime_error("no option " + name);
}

TEST(DocgenDescribeApp, ReadsTheTree) {
  Example example;
  CommandDoc doc = describe_app(example.app);
  EXPECT_EQ(doc.name, "tool");
  EXPECT_EQ(doc.footer, ".Footer with a leading dot and a \\ backslash");
  ASSERT_EQ(doc.commands.size(), 3u);
  const CommandDoc& replay = doc.commands[0].commands.at(0);
  EXPECT_EQ(replay.name, "replay");
  EXPECT_THAT(named(replay, "policy").choices, ElementsAre("fifo", "backfill"));
  EXPECT_EQ(named(replay, "policy").value_name, "TEXT");
  EXPECT_THAT(named(replay, "level").choices, ElementsAre("high", "low"));
  EXPECT_EQ(named(replay, "trace").kind, ValueKind::File);
  EXPECT_TRUE(named(replay, "trace").required);
  EXPECT_EQ(named(replay, "count").default_value, "2");
  EXPECT_THAT(named(replay, "count").short_names, ElementsAre("n"));
  EXPECT_EQ(named(replay, "root").kind, ValueKind::Directory);
  EXPECT_EQ(named(replay, "root").value_name, "DIR");
  for (const OptionDoc& option : replay.options) EXPECT_NE(option.long_names, std::vector<std::string>{"secret"});

  const CommandDoc& show = doc.commands[1];
  EXPECT_EQ(named(show, "id").kind, ValueKind::Job);
  EXPECT_TRUE(named(show, "id").is_positional());
  EXPECT_FALSE(named(show, "json").takes_value());
  EXPECT_EQ(show.options.back().positional, "id");  // positionals after the options

  const CommandDoc& run = doc.commands[2];
  EXPECT_TRUE(named(run, "wait").value_optional);
  EXPECT_EQ(named(run, "command").kind, ValueKind::Command);
  EXPECT_TRUE(named(run, "command").repeatable);
  EXPECT_THAT(doc.commands[1].commands, IsEmpty());
}

TEST(DocgenDescribeApp, RendersEveryFormat) {
  Example example;
  CommandDoc doc = describe_app(example.app);
  CompletionSettings settings{"echo 7"};
  std::string bash = bash_completion(doc, settings);
  EXPECT_THAT(bash, HasSubstr("'tool sim replay --level') COMPREPLY=($(compgen -W 'high low'"));
  EXPECT_THAT(bash, HasSubstr("'tool sim replay --root') compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY "
                              "< <(compgen -d"));
  EXPECT_THAT(zsh_completion(doc, settings), HasSubstr("'(--count -n)'{--count=,-n+}'[How many]:count: '"));
  EXPECT_THAT(fish_completion(doc, settings), HasSubstr("-l policy -x -a 'fifo backfill' -d 'The policy'"));
  ManPageSpec spec{"tool", 1, "tool 1", "User Commands", {"tool"}, true, {}, {}};
  std::string page = man_page(doc, spec);
  EXPECT_THAT(page, HasSubstr(".PP\n\\&.Footer with a leading dot and a \\e backslash\n"));
  ManPageSpec sim{"tool-sim", 1, "tool 1", "User Commands", {"tool", "sim"}, false, {}, {}};
  EXPECT_THAT(man_page(doc.commands[0], sim),
              HasSubstr("\\fB\\-n\\fR, \\fB\\-\\-count\\fR \\fIINT\\fR\nHow many. Default: \\fB2\\fR.\n"));
}

}  // namespace
}  // namespace gpupool::cli
