import torch
import torch.distributed as dist


def broadcast_from_last_stage(tensor, group):
    last = dist.get_process_group_ranks(group)[-1]
    dist.broadcast(tensor, src=last, group=group)
    return tensor


class Generator:
    def __init__(self, model, pp_group, seed):
        self.model = model
        self.pp_group = pp_group
        self.rng = torch.Generator()
        self.rng.manual_seed(seed)

    def sample(self, logits):
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=self.rng).view(-1)

    def update_status(self, tokens, pos, done, eod):
        return done | (tokens[:, pos] == eod)

    def generate(self, prompts, eod, max_len):
        tokens = self.model.pad(prompts, max_len)
        done = torch.zeros(len(prompts), dtype=torch.bool)
        for pos in range(1, max_len):
            logits = self.model(tokens[:, :pos])
            broadcast_from_last_stage(logits.clone(), self.pp_group)
            tokens[:, pos] = self.sample(logits[:, -1, :])
            done = self.update_status(tokens, pos, done, eod)
            if torch.all(done):
                break
        return tokens
