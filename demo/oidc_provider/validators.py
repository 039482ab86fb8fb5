"""The provider's claims: the person's Django groups as a `groups` claim (what an identity
provider such as Keycloak or Okta sends), their e-mail and username."""

from oauth2_provider.oauth2_validators import OAuth2Validator


class GroupsValidator(OAuth2Validator):
    # A claim without a scope here is dropped; groups come with "profile".
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "profile"}

    def get_additional_claims(self, request):
        user = request.user
        return {
            "groups": sorted(user.groups.values_list("name", flat=True)),
            "email": user.email,
            "preferred_username": user.username,
        }
