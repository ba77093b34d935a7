#include "docgen/man_page.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "docgen/command_doc_testing.h"

namespace gpupool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(DocgenRoffText, EscapesBackslashesAndOptionHyphensOnly) {
  EXPECT_EQ(roff_text("use --gpu-count or -g, not a comma-separated list"),
            "use \\-\\-gpu\\-count or \\-g, not a comma-separated list");
  EXPECT_EQ(roff_text("(see --after) [-q]"), "(see \\-\\-after) [\\-q]");
  EXPECT_EQ(roff_text("a\\b"), "a\\eb");
  EXPECT_EQ(roff_text("GPUs 0-7"), "GPUs 0-7");
}

TEST(DocgenRoffText, NoLineStartsWithAControlCharacter) {
  EXPECT_EQ(roff_text(".hidden"), "\\&.hidden");
  EXPECT_EQ(roff_text("first\n'quoted' and .dot"), "first\n\\&'quoted' and .dot");
}

TEST(DocgenRoffText, BackticksAreBoldWhenBalanced) {
  EXPECT_EQ(roff_text("run `gpupool list --json`"), "run \\fBgpupool list \\-\\-json\\fR");
  EXPECT_EQ(roff_text("a lone ` here"), "a lone \\(ga here");
}

TEST(DocgenRoffText, NonAsciiAsUnicodeEscapes) {
  EXPECT_EQ(roff_text("a \xE2\x80\x94 b"), "a \\[u2014] b");
  EXPECT_EQ(roff_text("caf\xC3\xA9"), "caf\\[u00E9]");
}

using testing_support::option;

CommandDoc man_page_example() {
  OptionDoc help = option({"help"}, {"h"}, "", "Print this help message and exit");
  OptionDoc policy = option({"policy"}, {}, "", "The policy", "TEXT");
  policy.choices = {"fifo", "backfill"};
  OptionDoc trace = option({"trace"}, {}, "", "Trace file", "FILE");
  trace.required = true;
  OptionDoc ids = option({}, {}, "ids", "Job ids", "JOB_ID");
  ids.repeatable = true;
  ids.required = true;
  CommandDoc replay{"replay", "Replay a trace", ".starts with a dot", {help, trace, policy}, {}};
  CommandDoc sim{"sim", "Simulate", "", {help}, {replay}};
  CommandDoc cancel{"cancel", "Cancel jobs", "", {help, ids}, {}};
  return CommandDoc{"tool", "tool: does things", "Footer line one\nline two.", {help}, {sim, cancel}};
}

TEST(DocgenManPage, OverviewListsCommandPagesAndSections) {
  CommandDoc tool = man_page_example();
  ManPageSpec spec{"tool", 1, "tool 1.0", "User Commands", {"tool"}, true, {}, {"tool-sim(1)"}};
  spec.sections.push_back({"EXIT STATUS", "", {{"0", "Success."}}});
  std::string page = man_page(tool, spec);
  EXPECT_THAT(page, HasSubstr(".TH \"TOOL\" 1 \"\" \"tool 1.0\" \"User Commands\"\n"));
  EXPECT_THAT(page, HasSubstr(".SH NAME\ntool \\- does things\n"));
  EXPECT_THAT(page, HasSubstr(".SH SYNOPSIS\n\\fBtool\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n"));
  EXPECT_THAT(page, HasSubstr(".TP\n\\fBtool\\-sim\\fR(1)\nSimulate\n"));
  EXPECT_THAT(page, HasSubstr(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nPrint this help message and exit.\n"));
  EXPECT_THAT(page, HasSubstr(".SH \"EXIT STATUS\"\n.TP\n\\fB0\\fR\nSuccess.\n"));
  EXPECT_THAT(page, HasSubstr(".SH \"SEE ALSO\"\n\\fBtool\\-sim\\fR(1)\n"));
  EXPECT_THAT(page, Not(HasSubstr("replay")));  // on the subcommand's own page
}

TEST(DocgenManPage, NestedCommandsAreSectionsOfTheirParentsPage) {
  CommandDoc tool = man_page_example();
  ManPageSpec spec{"tool-sim", 1, "tool 1.0", "User Commands", {"tool", "sim"}, false, {}, {"tool(1)"}};
  std::string page = man_page(tool.commands[0], spec);
  EXPECT_THAT(page, HasSubstr(".SS \"tool sim replay\"\n\\fBtool sim replay\\fR \\fB\\-\\-trace\\fR \\fIFILE\\fR "
                              "[\\fIOPTIONS\\fR]\n"));
  EXPECT_THAT(page, HasSubstr(".PP\n\\&.starts with a dot\n"));
  EXPECT_THAT(page, HasSubstr("\\fB\\-\\-policy\\fR \\fITEXT\\fR\nThe policy. One of \\fBfifo\\fR, \\fBbackfill\\fR.\n"));
  EXPECT_THAT(page, HasSubstr("Trace file. Required.\n"));
}

TEST(DocgenManPage, PositionalsAreArguments) {
  CommandDoc tool = man_page_example();
  ManPageSpec spec{"tool-cancel", 1, "tool 1.0", "User Commands", {"tool", "cancel"}, false, {}, {}};
  std::string page = man_page(tool.commands[1], spec);
  EXPECT_THAT(page, HasSubstr(".SH SYNOPSIS\n\\fBtool cancel\\fR [\\fIOPTIONS\\fR] \\fIids\\fR ...\n"));
  EXPECT_THAT(page, HasSubstr(".SH ARGUMENTS\n.TP\n\\fIids\\fR ...\nJob ids.\n"));
  EXPECT_THAT(page, Not(HasSubstr("SEE ALSO")));
}

}  // namespace
}  // namespace gpupool
