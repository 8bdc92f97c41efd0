// A machine the planner predicts for: what one device can do (peak FLOP/s per
// dtype, memory and its bandwidth, how GEMM efficiency grows with the GEMM's
// size) and how devices talk (inside a node, across nodes). Machines are data:
// JSON presets under engine/plan/machines/ compiled in, a JSON file, or this
// CPU measured by calibrate_this_machine().
#pragma once
#include <string>
#include <vector>

namespace ptdp {
class Device;
}

namespace ptdp::plan {

enum class DType { fp32, bf16, fp16 };
const char *dtype_name(DType d);
int dtype_bytes(DType d);

struct Link {
  double bandwidth = 0;   // bytes/s per device, one direction
  double efficiency = 1;  // fraction of it a collective reaches
  double latency_s = 0;   // per message step
  double effective() const { return bandwidth * efficiency; }
};

struct Machine {
  std::string name, description;
  int devices_per_node = 8;
  double peak_fp32 = 0, peak_bf16 = 0, peak_fp16 = 0;  // FLOP/s per device
  double memory_bytes = 0;           // per device
  double memory_reserved_bytes = 0;  // context, communication buffers, fragmentation
  double memory_bandwidth = 0;       // bytes/s per device
  double memory_efficiency = 1;      // what streaming element-wise kernels reach
  // Bytes per second (as the model counts them) of the element-wise kernels
  // when they are compute-bound rather than memory-bound (a CPU: GeLU,
  // softmax, dropout's random numbers); 0 = memory_bandwidth x efficiency.
  double elementwise_bandwidth = 0;
  // GEMM efficiency: output tiles of tile_m x tile_n spread over `units`
  // (SMs, cores) in waves; a tile's work is K long and costs k_half of setup.
  int gemm_units = 1, gemm_tile_m = 128, gemm_tile_n = 128;
  double gemm_k_half = 0, gemm_max_efficiency = 1;
  double op_overhead_s = 0;  // fixed cost of every kernel (launch)
  // Parameters per second of the optimizer step (gradient norm, AdamW) when it
  // is compute-bound (a CPU); 0 = from the memory bandwidth (a GPU).
  double optimizer_params_per_s = 0;
  Link intra, inter;
  // Devices of a node that share one set of cores and one memory (CPU thread
  // ranks): each of r ranks gets 1/r of the FLOP/s, memory bandwidth and units.
  bool shared_node = false;
  double device_hour_usd = 0;

  double peak(DType d) const;
};

// The compiled-in presets, by name.
std::vector<std::string> machine_preset_names();
// A compiled-in preset's name (which load_machine takes before a file of that name).
bool is_machine_preset(const std::string &name);
// A preset name or a JSON file. An unknown name lists the presets.
Machine load_machine(const std::string &name_or_file);
// Parses JSON text (origin names it in errors); every field is checked.
Machine machine_from_json(const std::string &text, const std::string &origin);
std::string machine_to_json(const Machine &m);

// The layer shape calibration times ptdp's element-wise kernels at (one
// sequence of `seq` tokens); a model's own shape when it is small enough.
struct CalibrationShape {
  int seq = 256, hidden = 256, heads = 4, ffn = 1024;
};

// Measures this machine's CPU as a one-node machine whose thread ranks share
// the cores, in about a second: on one core, ptdp's GEMM at a few shapes
// (peak, k_half, per-call cost), ptdp's element-wise kernels of one layer
// (their bytes as the model counts them per second), its AdamW step, and two
// threads handing buffers over through shared memory (the thread
// communicator's bandwidth and latency); all cores' GEMM rate for the log.
// Per-core rates are scaled by the cores: r ranks get cores / r threads each.
// `log` gets what was measured.
Machine calibrate_this_machine(std::string *log, const CalibrationShape &shape = {});

// Measures one GPU (`dev`) through ptdp's op table in `dt`, in a few seconds:
// its GEMM (peak, k_half), a copy's bandwidth, one layer's element-wise ops
// (their efficiency against that bandwidth), the optimizer step and the cost of
// a tiny kernel. The rest (links, GPUs per node, memory, GEMM tiling, price)
// is `base`'s, which one GPU cannot measure. `gemm_size`: M = N of the timed
// GEMMs (K up to it); the copy and the optimizer stream 4 M^2 floats.
Machine calibrate_gpu(Device &dev, DType dt, const Machine &base, std::string *log,
                      const CalibrationShape &shape, int gemm_size = 4096);

}  // namespace ptdp::plan
