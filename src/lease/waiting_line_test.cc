#include "lease/waiting_line.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

LinePlace waiting(double arrival_s, unsigned gpus, bool slice = false) {
  return LinePlace{"t", arrival_s, LineRequestSize{gpus, slice}};
}

TEST(WaitingLineTicket, NameSortsByArrivalAndGivesBackWhatItSays) {
  std::string early = ticket_name(1796500000, 5, 4242, {8, false});
  std::string late = ticket_name(1796500000, 123456789, 17, {2, true});
  EXPECT_EQ(early, "1796500000000000005.4242.g8");
  EXPECT_EQ(late, "1796500000123456789.17.s2");
  EXPECT_LT(early, late);
  auto place = parse_ticket_name(late);
  ASSERT_TRUE(place);
  EXPECT_EQ(place->name, late);
  EXPECT_NEAR(place->arrival_s, 1796500000.123456789, 1e-6);
  ASSERT_TRUE(place->size);
  EXPECT_EQ(place->size->gpu_count, 2u);
  EXPECT_TRUE(place->size->slice);
}

TEST(WaitingLineTicket, AnOlderVersionsTicketHasNoSize) {
  auto place = parse_ticket_name("1796500000000000005.4242");
  ASSERT_TRUE(place);
  EXPECT_FALSE(place->size);
}

TEST(WaitingLineTicket, AnythingElseIsNoTicket) {
  for (const char* name : {"", "x", "17965000000000000054242", "179650000000000000x.1.g1", "1796500000000000005.",
                           "1796500000000000005.pid.g1", "-796500000000000005.1.g1"}) {
    EXPECT_FALSE(parse_ticket_name(name)) << name;
  }
  // A ticket whose size part is garbage keeps its place with no size: nobody passes it.
  for (const char* name : {"1796500000000000005.1.g0", "1796500000000000005.1.x4", "1796500000000000005.1.g"}) {
    auto place = parse_ticket_name(name);
    ASSERT_TRUE(place) << name;
    EXPECT_FALSE(place->size) << name;
  }
}

TEST(WaitingLineSize, FewerGpusAndSlicesAreSmaller) {
  EXPECT_TRUE((LineRequestSize{1, false} < LineRequestSize{8, false}));
  EXPECT_TRUE((LineRequestSize{2, true} < LineRequestSize{2, false}));
  EXPECT_FALSE((LineRequestSize{2, false} < LineRequestSize{2, false}));
  EXPECT_FALSE((LineRequestSize{2, true} < LineRequestSize{2, true}));
  EXPECT_FALSE((LineRequestSize{4, true} < LineRequestSize{2, false}));
}

TEST(WaitingLineTurn, AnEmptyLineLetsAnyoneTry) { EXPECT_TRUE(line_turn({}, {8, false}, 100, 600).may_try); }

TEST(WaitingLineTurn, ASmallerRequestPassesWideOnesWithinTheWindow) {
  EXPECT_TRUE(line_turn({waiting(100, 8), waiting(150, 4)}, {1, false}, 400, 600).may_try);
  EXPECT_TRUE(line_turn({waiting(100, 1)}, {1, true}, 400, 600).may_try);  // a slice passes a whole GPU
}

TEST(WaitingLineTurn, EqualOrLargerRequestsKeepTheirTurn) {
  LineTurn turn = line_turn({waiting(100, 8), waiting(150, 1)}, {1, false}, 120, 600);
  EXPECT_FALSE(turn.may_try);
  EXPECT_EQ(turn.why_not, "waiting in line: 2 earlier requests go first");
  EXPECT_EQ(line_turn({waiting(100, 2)}, {4, false}, 120, 600).why_not, "waiting in line: 1 earlier request goes first");
}

TEST(WaitingLineTurn, AfterTheWindowNobodyPassesTheFirst) {
  LineTurn turn = line_turn({waiting(100, 8)}, {1, false}, 700, 600);
  EXPECT_FALSE(turn.may_try);
  EXPECT_EQ(turn.why_not, "waiting in line: 1 earlier request goes first (the first has waited 10 min: smaller "
                          "requests no longer pass it)");
  EXPECT_EQ(line_turn({waiting(100, 8)}, {1, false}, 160, 30).why_not,
            "waiting in line: 1 earlier request goes first (the first has waited 60 s: smaller requests no longer "
            "pass it)");
  EXPECT_FALSE(line_turn({waiting(100, 8)}, {1, false}, 100, 0).may_try);  // a window of 0: strictly in order
}

TEST(WaitingLineTurn, MigDevicesAndGpusWaitInLinesOfTheirOwn) {
  std::string name = ticket_name(1796500000, 5, 4242, {1, false, true});
  EXPECT_EQ(name, "1796500000000000005.4242.m1");
  auto place = parse_ticket_name(name);
  ASSERT_TRUE(place && place->size);
  EXPECT_TRUE(place->size->mig);
  LinePlace device{"m", 100, LineRequestSize{1, false, true}};
  // A waiting MIG request holds up no GPU request, long after the window, nor one the other way.
  EXPECT_TRUE(line_turn({device}, {1, false}, 1000, 600).may_try);
  EXPECT_TRUE(line_turn({device}, {1, true}, 1000, 600).may_try);
  EXPECT_TRUE(line_turn({waiting(100, 8)}, {1, false, true}, 1000, 600).may_try);
  // Within its own line, first come, first served.
  EXPECT_FALSE(line_turn({device, waiting(50, 8)}, {1, false, true}, 101, 600).may_try);
  EXPECT_EQ(line_turn({device, waiting(50, 8)}, {1, false, true}, 101, 600).why_not,
            "waiting in line: 1 earlier request goes first");
  LinePlace unknown{"x", 100, std::nullopt};
  EXPECT_FALSE(line_turn({unknown}, {1, false, true}, 101, 600).may_try);
}

TEST(WaitingLineTurn, ATicketOfUnknownSizeIsNeverPassed) {
  LinePlace unknown{"x", 100, std::nullopt};
  EXPECT_FALSE(line_turn({unknown}, {1, true}, 101, 600).may_try);
}

}  // namespace
}  // namespace gpupool
