// Plan JSON text form: round trip, stable bytes, syntax vs semantic errors.
#include "impl/sharding/plan_json.h"

#include <gtest/gtest.h>

#include "impl/sharding/json.h"
#include "impl/sharding/layout.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::sharding {
namespace {

Plan RichPlan() {
  Plan p = testing::TwoTablePlan(4, 2);
  p.features[0].name = "quote\" back\\slash\ttab \x01 \xc3\xa9";
  p.features[1].pooling_factor = 0.1f;
  p.tables[0].init.kind = InitConfig::Kind::kConstant;
  p.tables[0].init.low = 1e-7f;
  p.table_plans[0] = MakeGrid(p.tables[0], {4, 4}, {1, 0}, 2);
  return p;
}

TEST(ShardingPlanJson, RoundTripPreservesEverything) {
  const Plan p = RichPlan();
  ASSERT_TRUE(ValidatePlan(p).ok());
  const std::string text = PlanToJson(p);
  Plan back;
  const Status s = PlanFromJson(text, &back);
  ASSERT_TRUE(s.ok()) << s.message() << "\n" << text;
  EXPECT_EQ(back.Hash(), p.Hash());
  EXPECT_EQ(back.features[0].name, p.features[0].name);
  EXPECT_EQ(back.features[1].pooling_factor, 0.1f);
  EXPECT_EQ(back.tables[0].init.low, 1e-7f);
  EXPECT_EQ(back.table_plans[0].type, ShardingType::kGrid);
  EXPECT_EQ(PlanToJson(back), text);  // export(import(export(p))) == export(p)
}

TEST(ShardingPlanJson, HostReduceChoiceRoundTripsOutsideTheHash) {
  Plan p = testing::TwoTablePlan(4, 2);
  const std::string unset = PlanToJson(p);
  EXPECT_EQ(unset.find("host_reduce"), std::string::npos);  // -1 (no choice) is not written
  for (int32_t choice : {0, 1}) {
    p.host_reduce = choice;
    const std::string text = PlanToJson(p);
    EXPECT_NE(text.find(choice ? "\"host_reduce\": true" : "\"host_reduce\": false"),
              std::string::npos)
        << text;
    Plan back;
    const Status s = PlanFromJson(text, &back);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(back.host_reduce, choice);
    EXPECT_EQ(back.Hash(), p.Hash());
    EXPECT_EQ(PlanToJson(back), text);
  }
  Plan back;
  EXPECT_TRUE(PlanFromJson(unset, &back).ok());
  EXPECT_EQ(back.host_reduce, -1);
  std::string bad = PlanToJson(p);
  const std::string key = "\"host_reduce\": true";
  const size_t at = bad.find(key);
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, key.size(), "\"host_reduce\": 2");
  const Status s = PlanFromJson(bad, &back);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("host_reduce must be true or false"), std::string::npos)
      << s.message();
}

TEST(ShardingPlanJson, TextIsReadable) {
  const std::string text = PlanToJson(testing::TwoTablePlan(2, 2));
  EXPECT_NE(text.find("\"format\": \"shardrec.plan\""), std::string::npos);
  EXPECT_NE(text.find("\"sharding\": \"row_wise\""), std::string::npos);
  EXPECT_NE(
      text.find("{\"row_offset\": 5, \"rows\": 5, \"col_offset\": 0, \"cols\": 8, \"rank\": 1}"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\"pooling\": \"mean\""), std::string::npos);
}

TEST(ShardingPlanJson, SyntaxErrorsAreCorruptWithOffsets) {
  const std::string text = PlanToJson(testing::TwoTablePlan(2, 2));
  Plan out;
  for (const std::string& bad :
       {std::string(""), text.substr(0, text.size() / 2), text + "x", std::string("{\"a\" 1}"),
        std::string("[1, 2,]"), std::string("\"\\q\""), std::string(200, '[')}) {
    const Status s = PlanFromJson(bad, &out);
    EXPECT_EQ(s.code(), Code::kCorrupt) << bad.substr(0, 40);
    EXPECT_NE(s.message().find("byte"), std::string::npos) << s.message();
  }
  // Well-formed JSON without the required members is corrupt too.
  const Status s = PlanFromJson("{\"format\": \"shardrec.plan\", \"version\": 1}", &out);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("world_size"), std::string::npos) << s.message();
}

TEST(ShardingPlanJson, SemanticErrorsAreInvalidArgumentNamingTheTable) {
  std::string text = PlanToJson(testing::TwoTablePlan(2, 2));
  const std::string from = "\"rank\": 1}";
  text.replace(text.rfind(from), from.size(), "\"rank\": 9}");
  Plan out;
  const Status s = PlanFromJson(text, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("table 'b'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 9 does not exist"), std::string::npos) << s.message();

  std::string bad_type = PlanToJson(testing::TwoTablePlan(2, 2));
  bad_type.replace(bad_type.find("\"row_wise\""), 10, "\"diagonal\"");
  const Status t = PlanFromJson(bad_type, &out);
  EXPECT_EQ(t.code(), Code::kInvalidArgument);
  EXPECT_NE(t.message().find("table 'a': unknown sharding type \"diagonal\""), std::string::npos)
      << t.message();
}

TEST(ShardingPlanJson, ParserHandlesEscapesAndNumbers) {
  json::Value v;
  ASSERT_TRUE(
      json::Parse(" {\"k\": [\"\\u00e9\\ud83d\\ude00\", -12, 3.5e2, true, null]} ", &v).ok());
  const json::Value* k = v.Find("k");
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(k->items.size(), 5u);
  EXPECT_EQ(k->items[0].text, "\xc3\xa9\xf0\x9f\x98\x80");
  int64_t i = 0;
  ASSERT_TRUE(json::GetInt(k->items[1], "x", &i).ok());
  EXPECT_EQ(i, -12);
  float f = 0;
  ASSERT_TRUE(json::GetFloat(k->items[2], "y", &f).ok());
  EXPECT_EQ(f, 350.0f);
  EXPECT_FALSE(json::GetInt(k->items[2], "z", &i).ok());             // not an integer
  EXPECT_EQ(json::Parse("\"\\ud83d\"", &v).code(), Code::kCorrupt);  // lone surrogate
  EXPECT_EQ(json::FormatFloat(0.1f), "0.1");
  EXPECT_EQ(json::FormatFloat(1.0f), "1");
}

}  // namespace
}  // namespace shardrec::sharding
