"""Retail: a customer-service simulator of an online store (:class:`RetailEnv`)."""

from agentgym_envs.business.retail.env import RetailEnv

__all__ = ["RetailEnv"]
