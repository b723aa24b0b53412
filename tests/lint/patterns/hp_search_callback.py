import torch.distributed as dist


def run_hp_search(trainer, n_trials, study):
    # transformers' run_hp_search_optuna: rank 0 runs the study, whose objective broadcasts
    # each trial; the other ranks receive n_trials of them. `world_size > 1` holds on every
    # job where ranks can disagree (one rank has nobody to hang with).
    if trainer.args.process_index == 0:

        def _objective(trial):
            if trainer.args.world_size > 1:
                box = [trial]
                dist.broadcast_object_list(box, src=0)
                trainer.train(trial=trial)
            else:
                trainer.train(trial=trial)

        study.optimize(_objective, n_trials=n_trials)
    else:
        for _ in range(n_trials):
            box = [None]
            dist.broadcast_object_list(box, src=0)
            trainer.train(trial=box[0])
