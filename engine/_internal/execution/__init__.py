"""The driver side of one run: the controller's state machine and what it decides with.

Report handling and rounds, stopping criteria, the failure policy and the diagnosis of a
failure, the callback runner and the ``Trial`` callbacks see, progress output, the checks
that what travels to the workers pickles, and the trainer state ``Trainer.restore`` reads.
``trainer_state`` is here rather than in ``run_state``: it is the driver's own object
(the pickled trainer) that a restore re-enters execution with, not a record of the run.
"""
