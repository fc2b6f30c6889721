/* hotpass forward-pass plugin ABI.
 *
 * A forward pass is a shared object that exports exactly one symbol, hp_forward_entry(), which
 * returns a table of three functions. The engine owns everything that outlives a candidate: the
 * weights (read-only), the paged KV cache, the batch description and the output buffers. The
 * plugin owns only private state (workspaces, derived weight layouts), which it allocates through
 * hp_services so the engine can account for it and reclaim it.
 *
 * One call of forward() is one engine step: a batch that may mix prefill chunks and decode tokens
 * of several sequences. For each token the plugin writes its K and V rows into the KV cache at
 * the token's position, attends causally over positions [0, position] of the same sequence, and
 * writes float32 logits for the rows the batch asks for.
 *
 * Plain C, fixed-width types, no ownership transfer across the boundary. Bump
 * HP_FORWARD_ABI_VERSION on any change to these structs or to the KV layout. */
#ifndef HOTPASS_FORWARD_ABI_H
#define HOTPASS_FORWARD_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HP_FORWARD_ABI_VERSION 1
#define HP_FORWARD_ENTRY_SYMBOL "hp_forward_entry"

#if defined(__GNUC__)
#define HP_EXPORT __attribute__((visibility("default")))
#else
#define HP_EXPORT
#endif

typedef enum hp_dtype { HP_DTYPE_F32 = 0, HP_DTYPE_F16 = 1, HP_DTYPE_BF16 = 2 } hp_dtype;
typedef enum hp_device { HP_DEVICE_CPU = 0, HP_DEVICE_CUDA = 1 } hp_device;
typedef enum hp_rope_type { HP_ROPE_DEFAULT = 0, HP_ROPE_LLAMA3 = 1 } hp_rope_type;
typedef enum hp_log_level { HP_LOG_DEBUG = 0, HP_LOG_INFO = 1, HP_LOG_WARN = 2, HP_LOG_ERROR = 3 } hp_log_level;

/* Return codes of create() and forward(). */
#define HP_OK 0
#define HP_ERR_UNSUPPORTED 1 /* a model feature or batch the plugin does not implement */
#define HP_ERR_OUT_OF_MEMORY 2
#define HP_ERR_INVALID 3 /* the engine passed something inconsistent */

/* A read-only weight: row-major, shape[0] is the outermost dimension. A Linear weight is
 * [out_features, in_features] as in PyTorch. data == NULL means "absent" (e.g. no bias). */
typedef struct hp_tensor {
    const char *name; /* the checkpoint's name, e.g. "model.layers.0.self_attn.q_proj.weight" */
    hp_dtype dtype;
    int32_t n_dim;
    int64_t shape[4];
    const void *data; /* on the model's device */
} hp_tensor;

/* The numbers that change the math. Everything a forward pass may depend on is here; fields that
 * do not apply are 0. */
typedef struct hp_config {
    int32_t n_vocab;
    int32_t d_model;
    int32_t n_layer;       /* decoder layers served by this engine (the fast tier serves fewer) */
    int32_t n_layer_model; /* decoder layers of the checkpoint */
    int32_t n_head;
    int32_t n_head_kv;
    int32_t d_head;
    int32_t d_ff;          /* dense MLP width */
    float norm_eps;        /* RMSNorm epsilon, for every norm including q/k norms */
    float rope_theta;
    hp_rope_type rope_type;
    float rope_factor;            /* llama3 only */
    float rope_low_freq_factor;   /* llama3 only */
    float rope_high_freq_factor;  /* llama3 only */
    int32_t rope_original_max_position; /* llama3 only */
    int32_t has_qk_norm;          /* per-head RMSNorm on q and k before RoPE (Qwen3) */
    int32_t tied_embeddings;      /* lm_head is token_embd */
    /* Mixture of experts; n_expert == 0 for dense models. */
    int32_t n_expert;
    int32_t n_expert_used;        /* top-k */
    int32_t d_ff_expert;
    int32_t norm_topk_prob;       /* renormalise the top-k routing weights to sum to 1 */
    int32_t d_ff_shared_expert;   /* 0: no shared expert; else its width (Qwen2-MoE) */
} hp_config;

/* One decoder layer's weights. Absent optional tensors have data == NULL. */
typedef struct hp_layer {
    hp_tensor attn_norm;            /* [d_model] */
    hp_tensor wq, wk, wv, wo;       /* [n_head*d_head][d_model], [n_head_kv*d_head][d_model] x2, [d_model][n_head*d_head] */
    hp_tensor bq, bk, bv, bo;       /* optional biases */
    hp_tensor q_norm, k_norm;       /* optional [d_head] */
    hp_tensor ffn_norm;             /* [d_model] */
    int32_t is_moe;                 /* 1: experts below; 0: dense w_gate/w_up/w_down */
    hp_tensor w_gate, w_up, w_down; /* dense: [d_ff][d_model] x2, [d_model][d_ff] */
    hp_tensor b_gate, b_up, b_down; /* optional dense MLP biases */
    hp_tensor router;               /* [n_expert][d_model] */
    const hp_tensor *expert_gate;   /* n_expert entries, each [d_ff_expert][d_model] */
    const hp_tensor *expert_up;     /* n_expert entries, each [d_ff_expert][d_model] */
    const hp_tensor *expert_down;   /* n_expert entries, each [d_model][d_ff_expert] */
    hp_tensor shared_gate, shared_up, shared_down; /* optional shared expert */
    hp_tensor shared_expert_gate;   /* optional [1][d_model]: sigmoid gate of the shared expert */
} hp_layer;

/* The paged KV cache, allocated by the engine and fixed for the engine's lifetime.
 * Layout (fixed by the ABI version): for layer l, k[l] and v[l] point at
 *   dtype [n_block][block_tokens][n_head_kv][d_head]
 * The token at position p of a sequence lives in block block_table[p / block_tokens], slot
 * p % block_tokens. */
typedef struct hp_kv_cache {
    hp_dtype dtype;
    int32_t block_tokens;
    int32_t n_block;
    void *const *k; /* n_layer pointers */
    void *const *v; /* n_layer pointers */
} hp_kv_cache;

typedef struct hp_model {
    hp_device device;
    hp_config config;
    hp_tensor token_embd;  /* [n_vocab][d_model] */
    hp_tensor output_norm; /* [d_model] */
    hp_tensor lm_head;     /* [n_vocab][d_model]; same data as token_embd when tied */
    const hp_layer *layers; /* config.n_layer entries */
    const hp_tensor *tensors; /* every weight of the served layers, by checkpoint name */
    int32_t n_tensors;
    const hp_kv_cache *kv;
} hp_model;

/* One engine step. Tokens of one sequence are contiguous and in position order:
 * sequence s owns tokens [seq_token_start[s], seq_token_start[s+1]). A decode token is a
 * sequence with one token; a prefill chunk is a sequence with several. Positions of a sequence's
 * tokens are consecutive; all KV positions before the first one were written by earlier steps. */
typedef struct hp_batch {
    int32_t n_token;
    const int32_t *token_ids;        /* [n_token] */
    const int32_t *positions;        /* [n_token] */
    int32_t n_seq;
    const int32_t *seq_token_start;  /* [n_seq + 1] */
    const int32_t *block_tables;     /* [n_seq][max_blocks_per_seq] block indices into the cache */
    int32_t max_blocks_per_seq;
    int32_t n_logit_row;
    const int32_t *logit_rows;       /* [n_logit_row] token indices whose logits are wanted */
} hp_batch;

typedef struct hp_output {
    float *logits;          /* [n_logit_row][n_vocab], written by the plugin */
    int32_t *expert_counts; /* optional [n_layer][n_expert]: tokens routed to each expert, accumulated */
} hp_output;

/* Services the engine offers. Memory from alloc is freed by the engine when the plugin is
 * destroyed if the plugin did not free it. */
typedef struct hp_services {
    void *ctx;
    void *(*alloc)(void *ctx, size_t bytes, size_t alignment);
    void (*free)(void *ctx, void *ptr);
    void (*log)(void *ctx, hp_log_level level, const char *message);
    void *stream;        /* cudaStream_t on CUDA, NULL on CPU */
    int32_t n_thread;    /* CPU threads the plugin may use */
    int32_t rank;        /* parallel context: this process's rank ... */
    int32_t world_size;  /* ... of world_size (1 = no parallelism) */
    void *communicator;  /* ncclComm_t when world_size > 1 */
} hp_services;

typedef struct hp_forward_vtable {
    uint32_t abi_version; /* must equal HP_FORWARD_ABI_VERSION */
    const char *name;
    int (*create)(const hp_model *model, const hp_services *services, void **state);
    int (*forward)(void *state, const hp_batch *batch, hp_output *out);
    void (*destroy)(void *state);
} hp_forward_vtable;

typedef const hp_forward_vtable *(*hp_forward_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* HOTPASS_FORWARD_ABI_H */
