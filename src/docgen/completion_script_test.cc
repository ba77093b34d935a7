#include "docgen/completion_script.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "docgen/command_doc_testing.h"

namespace gpupool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing_support::option;

CommandDoc example() {
  OptionDoc help = option({"help"}, {"h"}, "", "Print this help message and exit");
  OptionDoc policy = option({"policy"}, {}, "", "Which policy [fifo] isn't it", "TEXT");
  policy.choices = {"fifo", "backfill"};
  OptionDoc trace = option({"trace"}, {}, "", "Trace: a file", "FILE");
  trace.kind = ValueKind::File;
  OptionDoc wait = option({"wait"}, {}, "", "Give up after this long", "TEXT");
  wait.value_optional = true;
  OptionDoc ids = option({}, {}, "ids", "Job ids", "JOB_ID");
  ids.kind = ValueKind::Job;
  ids.repeatable = true;
  ids.required = true;
  OptionDoc command = option({}, {}, "command", "The command", "COMMAND");
  command.kind = ValueKind::Command;
  command.repeatable = true;
  CommandDoc replay{"replay", "Replay a trace", "", {help, trace, policy}, {}};
  CommandDoc list{"list", "List fixtures", "", {help}, {}};
  CommandDoc sim{"sim", "Simulate", "", {help}, {replay, list}};
  CommandDoc cancel{"cancel", "Cancel jobs", "", {help, ids}, {}};
  CommandDoc run{"run", "Run it", "", {help, wait, command}, {}};
  CommandDoc top_list{"list", "List GPUs", "", {help}, {}};
  return CommandDoc{"my-tool", "my-tool: does things", "", {help}, {top_list, sim, cancel, run}};
}

const CompletionSettings kSettings{"printf '1\\n2\\n'"};

TEST(DocgenBashCompletion, KnowsCommandsOptionsValuesAndOperands) {
  std::string script = bash_completion(example(), kSettings);
  EXPECT_THAT(script, HasSubstr("    'my-tool') echo 'list sim cancel run' ;;\n"));
  EXPECT_THAT(script, HasSubstr("    'my-tool sim') echo 'replay list' ;;\n"));
  EXPECT_THAT(script, HasSubstr("    'my-tool sim replay') echo '--help -h --trace --policy' ;;\n"));
  // --wait may stand alone: the next word is not its value.
  EXPECT_THAT(script, HasSubstr("'my-tool sim replay --trace'|'my-tool sim replay --policy') return 0"));
  EXPECT_THAT(script, Not(HasSubstr("'my-tool run --wait'")));
  EXPECT_THAT(script, HasSubstr("'my-tool sim replay --policy') COMPREPLY=($(compgen -W 'fifo backfill' -- \"$cur\"))"));
  EXPECT_THAT(script, HasSubstr("'my-tool sim replay --trace') compopt -o filenames"));
  EXPECT_THAT(script, HasSubstr("'my-tool cancel') COMPREPLY=($(compgen -W \"$(_my_tool_job_ids)\""));
  EXPECT_THAT(script, HasSubstr("_my_tool_job_ids() {\n  printf '1\\n2\\n'\n}"));
  EXPECT_THAT(script, HasSubstr("complete -F _my_tool my-tool\n"));
}

TEST(DocgenBashCompletion, NoJobIdHelperWithoutJobIds) {
  CommandDoc plain{"plain", "", "", {option({"config"}, {}, "", "Config", "FILE")}, {}};
  EXPECT_THAT(bash_completion(plain, kSettings), Not(HasSubstr("job_ids")));
}

TEST(DocgenZshCompletion, SpecsEscapeAndDescribe) {
  std::string script = zsh_completion(example(), kSettings);
  EXPECT_THAT(script, HasSubstr("#compdef my-tool\n"));
  EXPECT_THAT(script, HasSubstr("'(--help -h)'{--help,-h}'[Print this help message and exit]'"));
  EXPECT_THAT(script, HasSubstr("'--policy=[Which policy \\[fifo\\] isn'\\''t it]:policy:(fifo backfill)'"));
  EXPECT_THAT(script, HasSubstr("'--trace=[Trace: a file]:file:_files'"));
  EXPECT_THAT(script, HasSubstr("'--wait=-[Give up after this long]::wait: '"));
  EXPECT_THAT(script, HasSubstr("'*:job_id:_my_tool_job_ids'"));
  EXPECT_THAT(script, HasSubstr("'*::command:_normal'"));
  EXPECT_THAT(script, HasSubstr("        'replay:Replay a trace'\n"));
  EXPECT_THAT(script, HasSubstr("        replay) _my_tool_sim_replay ;;\n"));
  EXPECT_THAT(script, HasSubstr("  compdef _my_tool my-tool\n"));
}

TEST(DocgenFishCompletion, ConditionsFollowTheCommandPath) {
  std::string script = fish_completion(example(), kSettings);
  EXPECT_THAT(script, HasSubstr("complete -c my-tool -n '__fish_use_subcommand' -a 'sim' -d 'Simulate'\n"));
  EXPECT_THAT(script, HasSubstr("complete -c my-tool -n '__fish_seen_subcommand_from sim; and not "
                                "__fish_seen_subcommand_from replay list' -a 'replay' -d 'Replay a trace'\n"));
  EXPECT_THAT(script, HasSubstr("complete -c my-tool -n '__fish_seen_subcommand_from sim; and "
                                "__fish_seen_subcommand_from replay' -l policy -x -a 'fifo backfill' "
                                "-d 'Which policy [fifo] isn\\'t it'\n"));
  EXPECT_THAT(script, HasSubstr("-l trace -r -F"));
  // The top-level list is not sim's list.
  EXPECT_THAT(script, HasSubstr("complete -c my-tool -n '__fish_seen_subcommand_from list; and not "
                                "__fish_seen_subcommand_from sim' -s h -l help"));
  EXPECT_THAT(script, HasSubstr("-n '__fish_seen_subcommand_from cancel' -a '(__my_tool_job_ids)'"));
  EXPECT_THAT(script, HasSubstr("-n '__fish_seen_subcommand_from run; and contains -- -- (commandline -opc)' "
                                "-a '(__my_tool_user_command)'"));
}

}  // namespace
}  // namespace gpupool
