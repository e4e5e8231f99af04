// Model files the coordinator's tests share (the fake compiler and workers
// serve them: fake_model_compiler.h, fake_worker_client.h).
#ifndef MESHSERVE_SERVER_COORDINATOR_TESTING_TEST_MODELS_H_
#define MESHSERVE_SERVER_COORDINATOR_TESTING_TEST_MODELS_H_

namespace meshserve {

// y = relu(x) on a fixed mesh {data: 4, model: 2}, x [8, 6] sharded on both.
inline constexpr char kFixedModelJson[] = R"({
  "name": "fixed", "mesh": {"data": 4, "model": 2}, "dtype": "float32",
  "inputs": {"x": {"shape": [8, 6], "sharding": ["data", "model"]}},
  "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_TESTING_TEST_MODELS_H_
