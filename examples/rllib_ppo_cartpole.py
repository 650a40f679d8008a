"""RLTrainer: train PPO on CartPole with RLlib, then act with the trained policy.

From the seed page air-trainers.rst, section "RLlib Trainer" ("to be filled in" there):
Ray AIR's ``RLTrainer(algorithm="PPO", config={...}, scaling_config=...)``, in our names.
``ScalingConfig(num_workers=2)`` gives RLlib 2 env runners (1 CPU each) beside the
algorithm's own process (1 CPU). The run ends at a mean episode return of 150, or after
15 iterations; each iteration is reported and checkpointed.
"""

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo import PPOConfig

from engine import ScalingConfig
from engine.rllib import RLTrainer, load_algorithm

trainer = RLTrainer(
    algorithm="PPO",
    config={
        "env": "CartPole-v1",
        # RLlib's PPO defaults, with the learning rate, epochs and value-loss weight of
        # RLlib's CartPole example.
        "lr": 3e-4,
        "num_epochs": 6,
        "vf_loss_coeff": 0.01,
        "seed": 0,
        # RLlib drops the episodes of an env runner that takes over 60 s to sample; on a
        # busy machine, wait for them instead.
        "sample_timeout_s": 600.0,
    },
    scaling_config=ScalingConfig(num_workers=2),
    stop={"env_runners/episode_return_mean": 150, "training_iteration": 15},
)
result = trainer.fit()

print("iterations:", result.metrics["training_iteration"])
print("mean episode return:", result.metrics["env_runners"]["episode_return_mean"])
print("checkpoint:", result.checkpoint)
assert result.metrics["env_runners"]["episode_return_mean"] >= 150

# Act: restore the checkpoint into an algorithm that samples nothing itself (no env
# runners) and let its policy play one episode greedily.
algo = load_algorithm(result.checkpoint,
                      config=PPOConfig().environment("CartPole-v1")
                      .env_runners(num_env_runners=0))
module = algo.get_module()
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=0)
episode_return, done = 0.0, False
with torch.no_grad():
    while not done:
        logits = module.forward_inference(
            {"obs": torch.as_tensor(np.array([obs]), dtype=torch.float32)}
        )["action_dist_inputs"]
        obs, reward, terminated, truncated, _ = env.step(int(logits[0].argmax()))
        episode_return += float(reward)
        done = terminated or truncated
algo.stop()
print("greedy episode return:", episode_return)
assert episode_return >= 100  # an untrained policy keeps the pole up for ~20 steps
