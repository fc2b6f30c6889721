// Every knob value of forward/cpu/baseline builds and passes the differential test against the
// reference. Built twice: with HOTPASS_ALL_VARIANTS every value of every knob (others at their
// defaults, or the first legal repair when that combination is illegal) plus an illegal
// combination that must fail to compile -- the `slow` set; without it a sampled subset (the scalar
// and AVX2 paths, the plain alternatives of the fast paths, and one random legal combination) --
// the `integration` set. Each variant runs the tiny presets and two odd-shaped models.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "differential.h"
#include "knob_manifest.h"
#include "variant_build.h"

namespace hp::test {
namespace {

const std::string kManifest = std::string(HOTPASS_SOURCE_DIR) + "/forward/cpu/baseline/knobs.json";

struct Variant {
    std::string tag;
    KnobValues values;
};

#ifdef HOTPASS_ALL_VARIANTS
// `values` with a knob changed, made legal by changing one other knob if needed.
std::optional<KnobValues> repaired(const KnobManifest &manifest, KnobValues values, const std::string &fixed) {
    if (!violated_constraint(manifest, values)) return values;
    for (const Knob &other : manifest.knobs) {
        if (other.define == fixed) continue;
        for (int64_t value : other.domain) {
            KnobValues trial = values;
            trial[other.define] = value;
            if (!violated_constraint(manifest, trial)) return trial;
        }
    }
    return std::nullopt;
}
#endif

std::vector<Variant> variants() {
    const KnobManifest manifest = load_knob_manifest(kManifest);
    const KnobValues defaults = default_knob_values(manifest);
    std::vector<Variant> out;
#ifdef HOTPASS_ALL_VARIANTS
    out.push_back({"defaults", defaults});
    for (const Knob &knob : manifest.knobs) {
        for (int64_t value : knob.domain) {
            if (value == knob.default_value) continue;
            KnobValues values = defaults;
            values[knob.define] = value;
            if (auto legal = repaired(manifest, values, knob.define)) out.push_back({knob.name + "_" + std::to_string(value), *legal});
        }
    }
#else
    for (int64_t level : {0, 2}) {
        KnobValues values = defaults;
        values["HP_SIMD_LEVEL"] = level;
        out.push_back({"simd_level_" + std::to_string(level), values});
    }
    {  // the plain alternatives of the batch-1 stream, the GEMM packing and exp
        KnobValues values = defaults;
        values["HP_GEMV_SPLIT"] = 0;
        values["HP_GEMV_ACCS"] = 2;
        values["HP_PREFETCH_BYTES"] = 1024;
        values["HP_GEMM_PACK_SIMD"] = 0;
        values["HP_VEC_EXP"] = 0;
        out.push_back({"plain_paths", values});
    }
    std::mt19937_64 rng(fresh_seed());
    for (int attempt = 0; attempt < 1000; ++attempt) {
        KnobValues values;
        for (const Knob &knob : manifest.knobs) values[knob.define] = knob.domain[rng() % knob.domain.size()];
        if (!violated_constraint(manifest, values)) {
            out.push_back({"random", values});
            break;
        }
    }
#endif
    return out;
}

class CpuBaselineVariant : public testing::TestWithParam<Variant> {
protected:
    static void SetUpTestSuite() { setenv("HOTPASS_PLUGIN_DIR", HOTPASS_PLUGIN_DIR, 1); }
};

TEST_P(CpuBaselineVariant, BuildsAndMatchesReference) {
    const Variant &variant = GetParam();
    SCOPED_TRACE("knobs:" + knob_flags(variant.values));
    const VariantBuild build = build_variant(variant.values, variant.tag);
    ASSERT_TRUE(build.ok) << build.log;
    for (const char *preset : {"tiny-llama", "tiny-moe", "tiny-qwen2-moe"}) {
        model::SyntheticOptions synthetic;
        synthetic.seed = fresh_seed();
        synthetic.bias_std = 0.05f;
        synthetic.norm_std = 0.2f;
        auto model = model::open_model(std::string("preset:") + preset, synthetic);
        ASSERT_TRUE(model.ok()) << model.error();
        DiffOptions options;
        options.seed = synthetic.seed;
        options.kv_dtype = DType::bf16;
        options.block_tokens = 7;
        options.n_thread = 2;
        options.tolerance = kv_tolerance(options.kv_dtype);
        SCOPED_TRACE(preset);
        run_differential(*model, "reference", build.path, options);
    }
    for (const char *preset : {"tiny-llama", "tiny-moe"}) {
        const uint64_t seed = fresh_seed();
        auto model = odd_shape_model(preset, DType::bf16, seed);
        ASSERT_TRUE(model.ok()) << model.error();
        DiffOptions options;
        options.seed = seed;
        options.kv_dtype = DType::f32;
        options.block_tokens = 5;
        options.n_thread = 2;
        options.tolerance = kv_tolerance(options.kv_dtype);
        SCOPED_TRACE(std::string("odd shapes ") + preset);
        run_differential(*model, "reference", build.path, options);
    }
    std::filesystem::remove_all(std::filesystem::path(build.path).parent_path());
}

INSTANTIATE_TEST_SUITE_P(Knobs, CpuBaselineVariant, testing::ValuesIn(variants()),
                         [](const testing::TestParamInfo<Variant> &info) { return info.param.tag + "_" + std::to_string(info.index); });

#ifdef HOTPASS_ALL_VARIANTS
TEST(CpuBaselineKnobs, IllegalCombinationFailsToCompile) {
    const KnobManifest manifest = load_knob_manifest(kManifest);
    KnobValues values = default_knob_values(manifest);
    values["HP_GEMV_ROWS"] = 8;
    values["HP_GEMV_TOKENS"] = 8;
    ASSERT_NE(violated_constraint(manifest, values), std::nullopt);
    const VariantBuild build = build_variant(values, "illegal");
    EXPECT_FALSE(build.ok);
    EXPECT_NE(build.log.find("knobs: HP_GEMV_ROWS * HP_GEMV_TOKENS <= 16"), std::string::npos) << build.log;
    std::filesystem::remove_all(std::filesystem::path(build.path).parent_path());
}
#endif

}  // namespace
}  // namespace hp::test
