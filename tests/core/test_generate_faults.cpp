// Out of memory during a run: the allocator's error (a CUDA c10::Error, the CPU allocator's
// "not enough memory", std::bad_alloc) becomes a ResourceError that says where it happened and
// what to try, nothing of the failed run is returned, and the same engine runs again afterwards.
// The GPU case is simulated on CPU through GenerateRequest::fault_hook.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <new>

#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "test_support.h"

namespace kvscope {
namespace {

class GenerateFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model(load_model(test::stories_dir() / "stories260K.bin", LoadOptions{}));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  GenerateRequest request() const {
    GenerateRequest req;
    req.prompt_ids = prompt_ids(*model_, "Once upon a time, there was a little", BosMode::kAlways);
    req.max_new_tokens = 8;
    req.stop_ids = {};
    req.reference_full = true;
    return req;
  }
  /// A hook that throws `error` at `phase` / `step`.
  template <class E>
  static std::function<void(std::string_view, int64_t)> fail_at(std::string_view phase, int64_t step, E error) {
    return [=](std::string_view at, int64_t n) {
      if (at == phase && n == step) throw error;
    };
  }
  static std::string message_of(const Engine& engine, const GenerateRequest& req) {
    try {
      generate(engine, req);
    } catch (const ResourceError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a ResourceError";
    return {};
  }
  static Model* model_;
};
Model* GenerateFaults::model_ = nullptr;

const c10::Error kCudaOom(c10::SourceLocation{"kvscope", __FILE__, static_cast<uint32_t>(__LINE__)},
                          "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity)");

TEST_F(GenerateFaults, OutOfMemoryAtPrefillSuggestsChunkedPrefillAndASmallerBudget) {
  const Engine engine(*model_);
  GenerateRequest req = request();
  req.fault_hook = fail_at("prefill", 0, kCudaOom);
  const std::string what = message_of(engine, req);
  EXPECT_NE(
      what.find("out of memory during the prefill of " + std::to_string(req.prompt_ids.size()) + " tokens on cpu"),
      std::string::npos)
      << what;
  EXPECT_NE(what.find("--prefill-chunk"), std::string::npos) << what;
  EXPECT_NE(what.find("smaller budget"), std::string::npos) << what;
  EXPECT_NE(what.find("CUDA out of memory. Tried to allocate 20.00 GiB"), std::string::npos) << what;
}

TEST_F(GenerateFaults, OutOfMemoryAtDecodeNamesTheStepAndTheEngineRunsAgain) {
  const Engine engine(*model_);
  const GenerateResult before = generate(engine, request());
  ASSERT_EQ(before.output_ids.size(), 8u);

  GenerateRequest req = request();
  req.fault_hook = fail_at("decode", 3, kCudaOom);
  const std::string what = message_of(engine, req);
  EXPECT_NE(what.find("out of memory at decode step 3 on cpu"), std::string::npos) << what;
  EXPECT_NE(what.find("smaller budget (--budget / --compression-ratio)"), std::string::npos) << what;

  // Nothing is left over from the failed run: the same engine gives the same tokens and fidelity.
  const GenerateResult after = generate(engine, request());
  EXPECT_EQ(after.output_ids, before.output_ids);
  EXPECT_EQ(after.fidelity.kl, before.fidelity.kl);
}

TEST_F(GenerateFaults, HostAllocationFailuresAreOutOfMemoryToo) {
  const Engine engine(*model_);
  GenerateRequest req = request();
  req.fault_hook = fail_at("decode", 0, std::bad_alloc());
  EXPECT_NE(message_of(engine, req).find("out of memory at decode step 0"), std::string::npos);
  req.fault_hook = fail_at("prefill", 0,
                           c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                      "DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB"));
  EXPECT_NE(message_of(engine, req).find("DefaultCPUAllocator: not enough memory"), std::string::npos);
}

TEST_F(GenerateFaults, ARealAllocationFailureOfTheCacheIsReportedTheSameWay) {
  // A KV cache of about a petabyte: LibTorch's CPU allocator refuses it (under ASan this needs
  // allocator_may_return_null=1, which tools/test.sh sets).
  const Engine engine(*model_);
  GenerateRequest req = request();
  req.max_new_tokens = int64_t{1} << 40;
  const std::string what = message_of(engine, req);
  EXPECT_NE(what.find("out of memory while allocating the KV cache for"), std::string::npos) << what;
}

TEST_F(GenerateFaults, OtherTorchErrorsAreNotDisguisedAsOutOfMemory) {
  const Engine engine(*model_);
  GenerateRequest req = request();
  req.fault_hook = fail_at("decode", 1,
                           c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                      "index 9999 is out of bounds for dimension 0 with size 512"));
  EXPECT_THROW(generate(engine, req), c10::Error);
}

}  // namespace
}  // namespace kvscope
