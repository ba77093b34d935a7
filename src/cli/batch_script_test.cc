#include "cli/batch_script.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

std::vector<std::vector<std::string>> directive_words(std::string_view script) {
  auto directives = script_directives(script, "train.sh");
  EXPECT_TRUE(directives.ok()) << directives.error().message;
  std::vector<std::vector<std::string>> words;
  for (const ScriptDirective& directive : directives.ok() ? *directives : std::vector<ScriptDirective>()) {
    words.push_back(directive.words);
  }
  return words;
}

TEST(BatchScriptDirectives, ReadsTheLeadingCommentBlockOnly) {
  const char* script =
      "#!/bin/bash\n"
      "# train the model\n"
      "#GPUPOOL --gpu-count 2\n"
      "\n"
      "  #GPUPOOL -t 1h --name 'my run'\n"
      "#GPUPOOLS --hold\n"
      "# GPUPOOL --hold\n"
      "#GPUPOOL\n"
      "python train.py\n"
      "#GPUPOOL --priority 5\n";
  EXPECT_EQ(directive_words(script), (std::vector<std::vector<std::string>>{
                                         {"--gpu-count", "2"}, {"-t", "1h", "--name", "my run"}}));
  auto directives = script_directives(script, "train.sh");
  ASSERT_TRUE(directives.ok());
  EXPECT_EQ(directives->at(0).line, 3u);
  EXPECT_EQ(directives->at(1).line, 5u);
}

TEST(BatchScriptDirectives, QuotesAsAShellDoes) {
  EXPECT_EQ(directive_words("#!/bin/sh\n#GPUPOOL --name \"a b\"'c'd\t--hold\r\n"),
            (std::vector<std::vector<std::string>>{{"--name", "a bcd", "--hold"}}));
  EXPECT_EQ(directive_words("#!/bin/sh\n#GPUPOOL --name ''\n"), (std::vector<std::vector<std::string>>{{"--name", ""}}));
  auto open = script_directives("#!/bin/sh\n\n#GPUPOOL --name 'oops\n", "train.sh");
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.error().message, "train.sh:3: a quote is not closed");
}

TEST(BatchScriptStandardInput, RunsTheTextWithItsShell) {
  EXPECT_TRUE(is_script("#!/bin/sh\n"));
  EXPECT_FALSE(is_script("echo hi\n"));
  EXPECT_EQ(*standard_input_command("echo hi\n"),
            (std::vector<std::string>{"/bin/sh", "-c", "echo hi\n", "gpupool-script"}));
  EXPECT_EQ(*standard_input_command("#!/bin/bash -e\necho hi\n"),
            (std::vector<std::string>{"/bin/bash", "-e", "-c", "#!/bin/bash -e\necho hi\n", "gpupool-script"}));
  EXPECT_EQ(*standard_input_command("#!/usr/bin/env zsh"),
            (std::vector<std::string>{"/usr/bin/env", "zsh", "-c", "#!/usr/bin/env zsh", "gpupool-script"}));
  auto python = standard_input_command("#!/usr/bin/env python3\nprint(1)\n");
  ASSERT_FALSE(python.ok());
  EXPECT_EQ(python.error().message,
            "a script on standard input runs with a shell, and '#!/usr/bin/env python3' is not one: save it to a "
            "file and submit the file");
  EXPECT_FALSE(standard_input_command("#!\n").ok());
}

}  // namespace
}  // namespace gpupool::cli
